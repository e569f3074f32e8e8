// Command keda-oracle decodes ScaledObjects strictly with KEDA's own v1alpha1 types and
// runs the admission webhook's validations that need no cluster, printing one verdict
// per object:
//
//	[{"name": "...", "ok": true}, {"name": "...", "ok": false, "error": "..."}]
//
// Input: the ScaledObjects as a JSON array on stdin. Exit 1 when any is rejected.
//
// Upstream code used (github.com/kedacore/keda/v2 at the pinned version,
// apis/keda/v1alpha1): the ScaledObject type (decoded with unknown fields refused, as
// the API server's strict field validation does against KEDA's CRD), and from
// scaledobject_webhook.go validateWorkload the checks that read only the object:
// verifyReplicaCount (CheckReplicaCountBoundsAreValid), verifyFallback
// (CheckFallbackValid), verifyTriggers (ValidateTriggers) and the scaling-modifiers
// formula (ValidateAndCompileScalingModifiers). Left out, because they list objects in a
// cluster: verifyHpas, verifyScaledObjects, verifyCPUMemoryScalers.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
)

type verdict struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func check(raw json.RawMessage) verdict {
	var so kedav1alpha1.ScaledObject
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&so); err != nil {
		return verdict{Name: "?", Error: fmt.Sprintf("strict decoding error: %v", err)}
	}
	v := verdict{Name: so.Namespace + "/" + so.Name}
	if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(&so); err != nil {
		v.Error = err.Error()
		return v
	}
	if err := kedav1alpha1.CheckFallbackValid(&so); err != nil {
		v.Error = err.Error()
		return v
	}
	if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
		v.Error = err.Error()
		return v
	}
	if so.IsUsingModifiers() {
		if _, err := kedav1alpha1.ValidateAndCompileScalingModifiers(&so); err != nil {
			v.Error = err.Error()
			return v
		}
	}
	v.OK = true
	return v
}

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var objs []json.RawMessage
	if err := json.Unmarshal(in, &objs); err != nil {
		fmt.Fprintln(os.Stderr, "input: a JSON array of ScaledObjects:", err)
		os.Exit(2)
	}
	out := []verdict{}
	failed := false
	for _, o := range objs {
		v := check(o)
		failed = failed || !v.OK
		out = append(out, v)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
	if failed {
		os.Exit(1)
	}
}
