// Command adapter-oracle runs prometheus-adapter's own discovery on an adapter config
// against a Prometheus, and prints the metric names the adapter would serve:
//
//	{"custom": [{"metric": "...", "resource": "pods", "namespaced": true}, ...],
//	 "external": [{"metric": "..."}, ...]}
//
// Usage: adapter-oracle --config FILE --prometheus-url URL
//
// Upstream code used (sigs.k8s.io/prometheus-adapter at the pinned version), as
// cmd/adapter/adapter.go wires it: pkg/config FromFile (strict YAML), pkg/naming
// NamersFromConfig for rules and externalRules, pkg/client (the same Prometheus client),
// pkg/custom-provider NewPrometheusProvider + its lister (series per rule, FilterSeries,
// the series registry) and pkg/external-provider's lister and registry. The only
// stand-in is the REST mapper (the adapter asks the API server; here a static one with
// the core and apps resources), and no Kubernetes client (only needed to answer queries).
// On rejection it prints {"error": MSG} and exits 1, MSG being upstream's message.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	prom "sigs.k8s.io/prometheus-adapter/pkg/client"
	adaptercfg "sigs.k8s.io/prometheus-adapter/pkg/config"
	cmprov "sigs.k8s.io/prometheus-adapter/pkg/custom-provider"
	extprov "sigs.k8s.io/prometheus-adapter/pkg/external-provider"
	"sigs.k8s.io/prometheus-adapter/pkg/naming"
)

type custom struct {
	Metric     string `json:"metric"`
	Resource   string `json:"resource"`
	Namespaced bool   `json:"namespaced"`
}

type external struct {
	Metric string `json:"metric"`
}

func fail(err error) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]string{"error": err.Error()})
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// mapper knows the kinds an adapter rule's resource labels name in practice.
func mapper() apimeta.RESTMapper {
	m := apimeta.NewDefaultRESTMapper(nil)
	for _, r := range []struct {
		gv    schema.GroupVersion
		kind  string
		scope apimeta.RESTScope
	}{
		{schema.GroupVersion{Version: "v1"}, "Pod", apimeta.RESTScopeNamespace},
		{schema.GroupVersion{Version: "v1"}, "Service", apimeta.RESTScopeNamespace},
		{schema.GroupVersion{Version: "v1"}, "Namespace", apimeta.RESTScopeRoot},
		{schema.GroupVersion{Version: "v1"}, "Node", apimeta.RESTScopeRoot},
		{schema.GroupVersion{Group: "apps", Version: "v1"}, "Deployment", apimeta.RESTScopeNamespace},
		{schema.GroupVersion{Group: "apps", Version: "v1"}, "StatefulSet", apimeta.RESTScopeNamespace},
		{schema.GroupVersion{Group: "apps", Version: "v1"}, "DaemonSet", apimeta.RESTScopeNamespace},
	} {
		m.Add(r.gv.WithKind(r.kind), r.scope)
	}
	return m
}

func main() {
	configFile := flag.String("config", "", "adapter config file (the ConfigMap's config.yaml)")
	promURL := flag.String("prometheus-url", "", "Prometheus base URL")
	flag.Parse()
	cfg, err := adaptercfg.FromFile(*configFile)
	if err != nil {
		fail(err)
	}
	rm := mapper()
	namers, err := naming.NamersFromConfig(cfg.Rules, rm)
	if err != nil {
		fail(fmt.Errorf("unable to construct naming scheme from metrics rules: %v", err))
	}
	extNamers, err := naming.NamersFromConfig(cfg.ExternalRules, rm)
	if err != nil {
		fail(fmt.Errorf("unable to construct naming scheme from external metrics rules: %v", err))
	}
	base, err := url.Parse(*promURL)
	if err != nil {
		fail(err)
	}
	client := prom.NewClientForAPI(prom.NewGenericAPIClient(http.DefaultClient, base, nil), "GET")

	out := map[string]interface{}{"custom": []custom{}, "external": []external{}}
	if len(namers) > 0 {
		p, lister := cmprov.NewPrometheusProvider(rm, nil, client, namers, time.Hour, 10*time.Minute)
		stop := make(chan struct{})
		lister.RunUntil(stop)
		var got []custom
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			infos := p.ListAllMetrics()
			if len(infos) > 0 {
				for _, i := range infos {
					got = append(got, custom{i.Metric, i.GroupResource.String(), i.Namespaced})
				}
				break
			}
		}
		close(stop)
		sort.Slice(got, func(a, b int) bool { return fmt.Sprint(got[a]) < fmt.Sprint(got[b]) })
		if got != nil {
			out["custom"] = got
		}
	}
	if len(extNamers) > 0 {
		lister, _ := extprov.NewPeriodicMetricLister(extprov.NewBasicMetricLister(client, extNamers, 10*time.Minute), time.Hour)
		reg := extprov.NewExternalSeriesRegistry(lister)
		lister.UpdateNow()
		var got []external
		for _, i := range reg.ListAllMetrics() {
			got = append(got, external{i.Metric})
		}
		sort.Slice(got, func(a, b int) bool { return got[a].Metric < got[b].Metric })
		if got != nil {
			out["external"] = got
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}
