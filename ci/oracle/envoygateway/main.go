// Envoy Gateway's own Gateway API translator (internal/gatewayapi of the pinned release),
// run offline on rendered manifests: the Gateway, GatewayClass and HTTPRoutes are loaded by
// Envoy Gateway's loader (resource.LoadResourcesFromYAMLBytes, its local validation and
// defaults) and the InferencePools are handed to the translator as extension backend
// resources, the way Envoy Gateway is configured for InferencePool
// (EnvoyGateway extensionManager.backendResources: group inference.networking.k8s.io, kind
// InferencePool); Envoy Gateway's policies and the Services they name go in too. Prints
// the translation result (xds IR, route and policy statuses) as JSON.
//
// Built as a nested module under Envoy Gateway's import path (ci/oracle/build.sh) so that
// it may import internal/.
//
//	envoygateway < manifests.yaml > result.json
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/envoyproxy/gateway/internal/gatewayapi"
	"github.com/envoyproxy/gateway/internal/gatewayapi/resource"
	"github.com/envoyproxy/gateway/internal/logging"
)

const poolGroup = "inference.networking.k8s.io"

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var known [][]byte
	var pools []unstructured.Unstructured
	for _, doc := range bytes.Split(in, []byte("\n---")) {
		var obj map[string]interface{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			fail(err)
		}
		if obj == nil {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		switch {
		case gvk.Group == poolGroup && gvk.Kind == "InferencePool":
			pools = append(pools, u)
		case gvk.Group == gwapiv1.GroupName || gvk.Group == egv1a1.GroupName ||
			(gvk.Group == "" && (gvk.Kind == "Namespace" || gvk.Kind == "Service")):
			known = append(known, doc)
		}
	}
	res, err := resource.LoadResourcesFromYAMLBytes(bytes.Join(known, []byte("\n---\n")), true)
	if err != nil {
		fail(err)
	}
	if res.GatewayClass == nil {
		fail(fmt.Errorf("no GatewayClass in the input"))
	}
	res.ExtensionRefFilters = append(res.ExtensionRefFilters, pools...)
	t := &gatewayapi.Translator{
		GatewayControllerName:   string(res.GatewayClass.Spec.ControllerName),
		GatewayClassName:        gwapiv1.ObjectName(res.GatewayClass.Name),
		EndpointRoutingDisabled: true,
		ExtensionGroupKinds:     []schema.GroupKind{{Group: poolGroup, Kind: "InferencePool"}},
		Logger:                  logging.DefaultLogger(io.Discard, egv1a1.LogLevelInfo),
	}
	result, _ := t.Translate(res) // route errors are in the statuses, printed below
	out, err := json.Marshal(map[string]interface{}{
		"xdsIR":                  result.XdsIR,
		"httpRoutes":             result.HTTPRoutes,
		"envoyExtensionPolicies": result.EnvoyExtensionPolicies,
	})
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "envoygateway:", err)
	os.Exit(1)
}
