// Command gpuinference-dp-oracle runs the NVIDIA device plugin's and GPU feature
// discovery's own code on a device-plugin config file plus the DaemonSet's flags/env,
// over a mock NVML node, and prints what they would do as JSON:
//
//	{"plugin": {"config": ..., "resources": {"nvidia.com/gpu": 8}, "warnings": [...]},
//	 "gfd":    {"config": ..., "labels": {...}, "warnings": [...]}}
//
// Input (stdin, JSON): {"configFile": PATH, "plugin": {"args": [...], "env": {...}},
// "gfd": {"args": [...], "env": {...}}, "dra": {}, "hardware": {...}} (see hardware.go;
// "dra": the NVIDIA DRA driver's view of the GPUs, dra.go). A side
// left out is not run. On rejection it prints {"error": MSG, "component": ...} and exits
// 1, MSG being upstream's own error chain.
//
// Upstream code used (github.com/NVIDIA/k8s-device-plugin at the pinned version):
// api/config/v1 NewConfig (file parsing, flag/env precedence, defaults) and
// DisableResourceNamingInConfig; internal/rm AddDefaultResourcesToConfig and
// NewNVMLResourceManagers (resource names and device counts, replicas, MIG strategies);
// internal/resource NewManager and internal/lm NewLabelers (GFD labels). The flag tables
// and validateFlags of cmd/nvidia-device-plugin/main.go and cmd/gpu-feature-discovery/main.go
// are in package main upstream, so they are restated here (flags.go), line by line.
//
// Two host files are read besides NVML (MIG device nodes, PCI class): with --fake-host,
// inside a private mount namespace, the program provides them (fakehost.go).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	nvinfo "github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/NVIDIA/k8s-device-plugin/internal/lm"
	"github.com/NVIDIA/k8s-device-plugin/internal/resource"
	"github.com/NVIDIA/k8s-device-plugin/internal/rm"
	"github.com/NVIDIA/k8s-device-plugin/internal/vgpu"
)

type side struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

type request struct {
	ConfigFile string   `json:"configFile"`
	Plugin     *side    `json:"plugin"`
	GFD        *side    `json:"gfd"`
	DRA        *side    `json:"dra"`
	Hardware   Hardware `json:"hardware"`
}

type rejection struct {
	Component string `json:"component"`
	Err       error
}

func (r *rejection) Error() string { return r.Err.Error() }

// warnings collects what upstream logs at WARNING or above through klog (e.g.
// api/config/v1 config.go DisableResourceNamingInConfig), one message per line
// without klog's header; INFO is discarded (see main).
type warnings []string

func (w *warnings) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if _, msg, ok := strings.Cut(line, "] "); ok {
			line = msg
		}
		*w = append(*w, line)
	}
	return len(p), nil
}

// logged is where klog's warnings go; each side takes and resets it.
var logged warnings

func takeWarnings() warnings {
	klog.Flush()
	w := logged
	logged = nil
	return w
}

// noVGPU is a node without vGPU PCI devices (GFD's vgpu labeler then adds nothing).
type noVGPU struct{}

func (noVGPU) Devices() ([]*vgpu.Device, error) { return nil, nil }

var _ vgpu.Interface = noVGPU{}

func main() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	klog.SetOutputBySeverity("WARNING", &logged)
	fake := len(os.Args) > 1 && os.Args[1] == "--fake-host"
	out, err := func() (out map[string]interface{}, err error) {
		// An NVML call the mock does not implement panics: report it as the oracle's
		// own limit, not as upstream's verdict.
		defer func() {
			if r := recover(); r != nil {
				err = &rejection{"oracle-mock", fmt.Errorf("mock NVML: %v", r)}
			}
		}()
		return run(os.Stdin, fake)
	}()
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err != nil {
		var rej *rejection
		comp := "request"
		if errors.As(err, &rej) {
			comp = rej.Component
		}
		_ = enc.Encode(map[string]string{"error": err.Error(), "component": comp})
		fmt.Fprintf(os.Stderr, "%s: %v\n", comp, err)
		os.Exit(1)
	}
	_ = enc.Encode(out)
}

func run(in io.Reader, fake bool) (map[string]interface{}, error) {
	var req request
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("request: %v", err)
	}
	srv, err := newServer(req.Hardware)
	if err != nil {
		return nil, err
	}
	if fake {
		if err := fakeHost(srv); err != nil {
			return nil, err
		}
	}
	devicelib := device.New(srv)
	// The mock is an NVML system: no WSL, no Tegra files, NVML present. Left to
	// detection, go-nvlib would look for libnvidia-ml.so.1 on this machine.
	infolib := nvinfo.New(
		nvinfo.WithNvmlLib(srv),
		nvinfo.WithDeviceLib(devicelib),
		nvinfo.WithPropertyExtractor(&nvinfo.PropertyExtractorMock{
			HasDXCoreFunc:          func() (bool, string) { return false, "mock" },
			HasNvmlFunc:            func() (bool, string) { return true, "mock" },
			HasTegraFilesFunc:      func() (bool, string) { return false, "mock" },
			HasAnIntegratedGPUFunc: func() (bool, string) { return false, "mock" },
		}),
	)
	out := map[string]interface{}{}
	if req.Plugin != nil {
		res, err := runPlugin(req, infolib, srv, devicelib)
		if err != nil {
			return nil, &rejection{"nvidia-device-plugin", err}
		}
		out["plugin"] = res
	}
	if req.GFD != nil {
		res, err := runGFD(req, infolib, srv, devicelib)
		if err != nil {
			return nil, &rejection{"gpu-feature-discovery", err}
		}
		out["gfd"] = res
	}
	if req.DRA != nil {
		res, err := runDRA(srv, devicelib)
		if err != nil {
			return nil, &rejection{"gpu-kubelet-plugin", err}
		}
		out["dra"] = res
	}
	return out, nil
}

// parse runs a urfave/cli app with the component's flags on args and env (the
// environment is replaced for the parse, as the container's would be).
func parse(flags []cli.Flag, s *side, configFile string) (*spec.Config, error) {
	saved := os.Environ()
	os.Clearenv()
	defer func() {
		os.Clearenv()
		for _, kv := range saved {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	}()
	for k, v := range s.Env {
		os.Setenv(k, v)
	}
	args := append([]string{"oracle"}, s.Args...)
	if configFile != "" {
		args = append(args, "--config-file="+configFile)
	}
	var config *spec.Config
	app := cli.NewApp()
	app.Flags = flags
	app.HideHelp = true
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	app.Action = func(c *cli.Context) error {
		var err error
		config, err = spec.NewConfig(c, flags)
		if err != nil {
			return fmt.Errorf("unable to load config: unable to finalize config: %v", err)
		}
		return nil
	}
	if err := app.Run(args); err != nil {
		return nil, err
	}
	return config, nil
}

func runPlugin(req request, infolib nvinfo.Interface, nvmllib nvml.Interface, devicelib device.Interface) (map[string]interface{}, error) {
	config, err := parse(pluginFlags(), req.Plugin, req.ConfigFile)
	if err != nil {
		return nil, err
	}
	config.Flags.GFD = nil // cmd/nvidia-device-plugin/main.go loadConfig
	spec.DisableResourceNamingInConfig(config)
	if err := validatePluginFlags(infolib, config); err != nil {
		return nil, fmt.Errorf("unable to validate flags: %v", err)
	}
	if err := rm.AddDefaultResourcesToConfig(infolib, nvmllib, devicelib, config); err != nil {
		return nil, fmt.Errorf("unable to add default resources to config: %v", err)
	}
	// plugin.New (internal/plugin/server.go) builds one plugin per resource manager
	// from rm.NewResourceManagers; with NVML that is NewNVMLResourceManagers. A plugin
	// with no devices is not started (cmd/nvidia-device-plugin/main.go startPlugins).
	rms, err := rm.NewNVMLResourceManagers(infolib, nvmllib, devicelib, config)
	w := takeWarnings()
	if err != nil {
		if *config.Flags.FailOnInitError {
			return nil, fmt.Errorf("error getting plugins: unable to create plugins: %v", err)
		}
		w = append(w, fmt.Sprintf("failOnInitError=false: no resources (%v)", err))
	}
	resources := map[string]int{}
	for _, r := range rms {
		if n := len(r.Devices()); n > 0 {
			resources[string(r.Resource())] = n
		}
	}
	return map[string]interface{}{
		"config":          config,
		"resources":       resources,
		"sharingStrategy": string(config.Sharing.SharingStrategy()),
		"warnings":        w,
	}, nil
}

func runGFD(req request, infolib nvinfo.Interface, nvmllib nvml.Interface, devicelib device.Interface) (map[string]interface{}, error) {
	dir, err := os.MkdirTemp("", "gfd-oracle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	machine := filepath.Join(dir, "product_name")
	mt := req.Hardware.MachineType
	if mt == "" {
		mt = "unknown"
	}
	if err := os.WriteFile(machine, []byte(mt+"\n"), 0o644); err != nil {
		return nil, err
	}
	// The node's DMI file and no timestamp label (it changes each run); the caller's
	// args/env come after, so a test can still set either.
	s := &side{Env: map[string]string{"GFD_MACHINE_TYPE_FILE": machine, "GFD_NO_TIMESTAMP": "true"}}
	for k, v := range req.GFD.Env {
		s.Env[k] = v
	}
	s.Args = req.GFD.Args
	config, err := parse(gfdFlags(), s, req.ConfigFile)
	if err != nil {
		return nil, err
	}
	if err := validateGFDFlags(config); err != nil {
		return nil, fmt.Errorf("unable to load config: unable to validate flags: %v", err)
	}
	spec.DisableResourceNamingInConfig(config)
	manager, err := resource.NewManager(infolib, nvmllib, devicelib, config)
	if err != nil {
		return nil, fmt.Errorf("failed to create resource manager: %w", err)
	}
	labelers, err := lm.NewLabelers(manager, noVGPU{}, config)
	if err != nil {
		return nil, fmt.Errorf("failed to create labelers: %w", err)
	}
	labels, err := labelers.Labels()
	if err != nil {
		return nil, fmt.Errorf("failed to get labels: %w", err)
	}
	return map[string]interface{}{"config": config, "labels": labels, "warnings": takeWarnings()}, nil
}

