package main

// The NVIDIA DRA driver's view of the node (github.com/NVIDIA/k8s-dra-driver-gpu
// v25.12.0, cmd/gpu-kubelet-plugin): for each GPU, the NVML facts its deviceLib.getGpuInfo
// (nvlib.go) reads through go-nvlib, formatted as it formats them. The driver itself
// cannot be built here (its tags are not valid Go module versions: the proxy refuses
// them), and its ResourceSlice shape (GpuInfo.GetDevice, deviceinfo.go; one slice per
// node pool, driver.go publishResources) is restated by tests/e2e/nodeagent.py from
// these facts. MIG devices are not listed: the DRA fleets claim whole GPUs.

import (
	"fmt"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// draGPU is one GPU as getGpuInfo sees it.
type draGPU struct {
	Minor                 int    `json:"minor"`
	UUID                  string `json:"uuid"`
	MemoryBytes           uint64 `json:"memoryBytes"`
	ProductName           string `json:"productName"`
	Brand                 string `json:"brand"`
	Architecture          string `json:"architecture"`
	CudaComputeCapability string `json:"cudaComputeCapability"`
	DriverVersion         string `json:"driverVersion"`
	CudaDriverVersion     string `json:"cudaDriverVersion"`
	PCIBusID              string `json:"pcieBusID"`
	MigEnabled            bool   `json:"migEnabled"`
	AddressingMode        string `json:"addressingMode,omitempty"`
}

func runDRA(nvmllib nvml.Interface, devicelib device.Interface) (map[string]interface{}, error) {
	devices, err := devicelib.GetDevices()
	if err != nil {
		return nil, fmt.Errorf("error enumerating GPUs: %w", err)
	}
	out := []draGPU{}
	for i, d := range devices {
		g := draGPU{}
		var ret nvml.Return
		if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting minor number for device %d: %v", i, ret)
		}
		if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting UUID for device %d: %v", i, ret)
		}
		if g.MigEnabled, err = d.IsMigEnabled(); err != nil {
			return nil, fmt.Errorf("error checking if MIG mode enabled for device %d: %w", i, err)
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting memory info for device %d: %v", i, ret)
		}
		g.MemoryBytes = mem.Total
		if g.ProductName, ret = d.GetName(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting product name for device %d: %v", i, ret)
		}
		if g.Architecture, err = d.GetArchitectureAsString(); err != nil {
			return nil, fmt.Errorf("error getting architecture for device %d: %w", i, err)
		}
		if g.Brand, err = d.GetBrandAsString(); err != nil {
			return nil, fmt.Errorf("error getting brand for device %d: %w", i, err)
		}
		if g.CudaComputeCapability, err = d.GetCudaComputeCapabilityAsString(); err != nil {
			return nil, fmt.Errorf("error getting CUDA compute capability for device %d: %w", i, err)
		}
		if g.DriverVersion, ret = nvmllib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting driver version: %v", ret)
		}
		cuda, ret := nvmllib.SystemGetCudaDriverVersion()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("error getting CUDA driver version: %v", ret)
		}
		g.CudaDriverVersion = fmt.Sprintf("%v.%v", cuda/1000, (cuda%1000)/10) // nvlib.go, as upstream
		if g.PCIBusID, err = d.GetPCIBusID(); err != nil {
			return nil, fmt.Errorf("error getting PCIe bus ID for device %d: %w", i, err)
		}
		// GetAddressingModeAsString: the mock implements no addressing-mode call, which a
		// non-coherent (PCIe/SXM x86) system answers with NOT_SUPPORTED, i.e. "".
		out = append(out, g)
	}
	return map[string]interface{}{"gpus": out}, nil
}
