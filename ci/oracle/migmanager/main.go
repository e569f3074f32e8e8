// Command migmanager applies a mig-parted config to a node's mock GPUs with mig-parted's
// own code, for the day-1 e2e's node-agent emulator (tests/e2e/nodeagent.py, which plays
// k8s-mig-manager's reconfigure flow around it).
//
// Input (stdin, JSON): {"configFile": PATH, "selectedConfig": NAME, "gpus": [{"deviceID":
// "0x20B210DE", "migCapable": true, "migEnabled": false, "migDevices": {"1g.10gb": 7}}]}.
// Output: the same GPUs after `nvidia-mig-parted apply` (mode, then config), or
// {"error": MSG} and exit 1, MSG being mig-parted's own error.
//
// Upstream code used (github.com/NVIDIA/mig-parted at the pinned version):
// cmd/nvidia-mig-parted/assert ParseConfigFile and GetSelectedMigConfig (the config file
// and its validation: api/spec/v1 Spec, MigConfigSpec, types.MigConfig), and the
// per-GPU match of WalkSelectedMigConfigForEachGPU (MatchesDeviceFilter,
// MatchesDevices). What differs: the GPUs are the input's, not the host's
// (util.GetGPUDeviceIDs reads NVML or sysfs), so that walk's loop is restated below
// over them; the decisions of apply/mode.go ApplyMigMode and apply/config.go
// ApplyMigConfig are restated line by line (their NVML calls become the mock GPU's
// fields). A mode change needs no reset here (the mock has no GPU clients).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	v1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted/assert"
	"github.com/NVIDIA/mig-parted/pkg/types"
)

type gpu struct {
	DeviceID   string         `json:"deviceID"`
	MigCapable bool           `json:"migCapable"`
	MigEnabled bool           `json:"migEnabled"`
	MigDevices map[string]int `json:"migDevices"`
}

type request struct {
	ConfigFile     string `json:"configFile"`
	SelectedConfig string `json:"selectedConfig"`
	GPUs           []gpu  `json:"gpus"`
}

func main() {
	out, err := run()
	enc := json.NewEncoder(os.Stdout)
	if err != nil {
		_ = enc.Encode(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	_ = enc.Encode(out)
}

// notCapable is the check apply/mode.go ApplyMigMode and apply/config.go ApplyMigConfig both
// open with (written twice upstream, once here): for a GPU that is not MIG-capable, done is
// true, with an error when the entry enables MIG on it (what names the step in the message).
func notCapable(mc *v1.MigConfigSpec, capable bool, what string) (done bool, err error) {
	if capable {
		return false, nil
	}
	if mc.MatchesAllDevices() || !mc.MigEnabled {
		return true, nil
	}
	return true, fmt.Errorf("cannot set %s on non MIG-capable GPU", what)
}

// walk is WalkSelectedMigConfigForEachGPU's loop (cmd/nvidia-mig-parted/assert/assert.go)
// over the request's GPUs.
func walk(migConfig v1.MigConfigSpecSlice, ids []types.DeviceID, f func(*v1.MigConfigSpec, int) error) error {
	for _, mc := range migConfig {
		for i, id := range ids {
			if !mc.MatchesDeviceFilter(id) || !mc.MatchesDevices(i) {
				continue
			}
			spec := mc
			if err := f(&spec, i); err != nil {
				return err
			}
		}
	}
	return nil
}

func run() (map[string]interface{}, error) {
	var req request
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("request: %v", err)
	}
	flags := &assert.Flags{ConfigFile: req.ConfigFile, SelectedConfig: req.SelectedConfig}
	if err := assert.CheckFlags(flags); err != nil {
		return nil, err
	}
	spec, err := assert.ParseConfigFile(flags)
	if err != nil {
		return nil, fmt.Errorf("error parsing config file: %v", err)
	}
	migConfig, err := assert.GetSelectedMigConfig(flags, spec)
	if err != nil {
		return nil, fmt.Errorf("error selecting MIG config: %v", err)
	}
	ids := make([]types.DeviceID, len(req.GPUs))
	for i, g := range req.GPUs {
		if ids[i], err = types.NewDeviceIDFromString(g.DeviceID); err != nil {
			return nil, fmt.Errorf("gpu %d: %v", i, err)
		}
	}
	gpus := req.GPUs
	// apply/mode.go ApplyMigMode
	err = walk(migConfig, ids, func(mc *v1.MigConfigSpec, i int) error {
		if done, err := notCapable(mc, gpus[i].MigCapable, "MIG mode"); done {
			return err
		}
		if gpus[i].MigEnabled != mc.MigEnabled {
			gpus[i].MigEnabled = mc.MigEnabled
			gpus[i].MigDevices = nil // a mode change destroys every GPU instance
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error applying MIG mode: %v", err)
	}
	// apply/config.go ApplyMigConfig
	err = walk(migConfig, ids, func(mc *v1.MigConfigSpec, i int) error {
		if done, err := notCapable(mc, gpus[i].MigCapable, "MIG config"); done {
			return err
		}
		if mc.MigEnabled && !gpus[i].MigEnabled {
			return fmt.Errorf("unable to apply MIG config with MIG mode disabled")
		}
		if !mc.MigEnabled && gpus[i].MigEnabled {
			return fmt.Errorf("MIG mode is currently enabled, but the configuration specifies it should be disabled")
		}
		if !mc.MigEnabled {
			return nil
		}
		if err := mc.MigDevices.AssertValidFormat(); err != nil {
			return fmt.Errorf("error setting MIGConfig: %v", err)
		}
		gpus[i].MigDevices = map[string]int(mc.MigDevices)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error applying MIG configuration: %v", err)
	}
	return map[string]interface{}{"gpus": gpus}, nil
}
