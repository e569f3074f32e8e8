package main

// The command-line flags (names, defaults, env vars) and validateFlags of the two
// upstream commands. Upstream keeps them in package main, which cannot be imported,
// so they are restated here from, at the pinned version:
//   cmd/nvidia-device-plugin/main.go   main() c.Flags, validateFlags
//   cmd/gpu-feature-discovery/main.go  main() config.flags, validateFlags
// Usage strings are left out; nothing else is changed. tests/oracle checks this
// table against the upstream source file (test_oracle_flags_match_upstream).

import (
	"fmt"
	"time"

	nvinfo "github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/urfave/cli/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/NVIDIA/k8s-device-plugin/internal/flags"
)

func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "dev-root", Aliases: []string{"nvidia-dev-root"}, EnvVars: []string{"NVIDIA_DEV_ROOT"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(string(spec.DeviceListStrategyEnvVar)), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gdrcopy-enabled", Value: true, EnvVars: []string{"GDRCOPY_ENABLED"}},
		&cli.BoolFlag{Name: "gds-enabled", Value: true, EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", Value: true, EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "kubelet-socket", Value: pluginapi.KubeletSocket, EnvVars: []string{"KUBELET_SOCKET"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Aliases: []string{"nvidia-ctk-path"}, Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
		&cli.StringSliceFlag{Name: "cdi-feature-flags", EnvVars: []string{"CDI_FEATURE_FLAGS"}},
	}
}

func gfdFlags() []cli.Flag {
	var kube flags.KubeClientConfig
	var node flags.NodeConfig
	f := []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"GFD_MIG_STRATEGY", "MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"}},
		&cli.BoolFlag{Name: "oneshot", Value: false, EnvVars: []string{"GFD_ONESHOT"}},
		&cli.BoolFlag{Name: "no-timestamp", Value: false, EnvVars: []string{"GFD_NO_TIMESTAMP"}},
		&cli.GenericFlag{Name: "sleep-interval", Value: spec.NewDurationValue(60 * time.Second), EnvVars: []string{"GFD_SLEEP_INTERVAL"}},
		&cli.StringFlag{Name: "output-file", Aliases: []string{"output", "o"}, Value: "/etc/kubernetes/node-feature-discovery/features.d/gfd", EnvVars: []string{"GFD_OUTPUT_FILE"}},
		&cli.StringFlag{Name: "machine-type-file", Value: "/sys/class/dmi/id/product_name", EnvVars: []string{"GFD_MACHINE_TYPE_FILE"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"GFD_CONFIG_FILE", "CONFIG_FILE"}},
		&cli.BoolFlag{Name: "use-node-feature-api", Value: true, EnvVars: []string{"GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
	}
	f = append(f, kube.Flags()...)
	return append(f, node.Flags()...)
}

// validatePluginFlags is cmd/nvidia-device-plugin/main.go validateFlags.
func validatePluginFlags(infolib nvinfo.Interface, config *spec.Config) error {
	deviceListStrategies, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy)
	if err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	hasNvml, _ := infolib.HasNvml()
	if deviceListStrategies.AnyCDIEnabled() && !hasNvml {
		return fmt.Errorf("CDI --device-list-strategy options are only supported on NVML-based systems")
	}
	if *config.Flags.Plugin.DeviceIDStrategy != spec.DeviceIDStrategyUUID && *config.Flags.Plugin.DeviceIDStrategy != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", *config.Flags.Plugin.DeviceIDStrategy)
	}
	if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
		if *config.Flags.MigStrategy == spec.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	switch *config.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", *config.Flags.DeviceDiscoveryStrategy)
	}
	switch *config.Flags.MigStrategy {
	case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
	default:
		return fmt.Errorf("unknown MIG strategy: %v", *config.Flags.MigStrategy)
	}
	if err := spec.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}

// validateGFDFlags is cmd/gpu-feature-discovery/main.go validateFlags.
func validateGFDFlags(config *spec.Config) error {
	switch *config.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra", "vfio":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", *config.Flags.DeviceDiscoveryStrategy)
	}
	return nil
}
