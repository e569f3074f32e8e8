package main

// The two host files upstream reads besides NVML, faked for the mock node inside a
// private mount namespace (run-deviceplugin.sh starts the program under
// `unshare --mount`, so nothing outside it sees these mounts):
//   - /proc/driver/nvidia-caps/mig-minors: the device plugin's MIG device paths
//     (internal/mig/mig-dp.go GetMigCapabilityDevicePaths, called from
//     internal/rm/nvml_devices.go GetPaths); without it rm cannot build a MIG device.
//   - /sys/bus/pci/devices/<bus id>: GFD's nvidia.com/gpu.mode label reads the PCI class
//     (internal/resource/nvml-device.go GetPCIClass through go-nvlib nvpci); the tree is
//     go-nvlib's own mock sysfs (pkg/nvpci/mock.go AddMockA100: an NVIDIA 3D controller).

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/NVIDIA/go-nvlib/pkg/nvpci"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func fakeHost(srv nvml.Interface) error {
	if err := syscall.Mount("tmpfs", "/proc/driver", "tmpfs", 0, ""); err != nil {
		return fmt.Errorf("--fake-host: mount tmpfs on /proc/driver (needs a private mount namespace: run-deviceplugin.sh): %v", err)
	}
	if err := writeMigMinors(srv); err != nil {
		return err
	}
	// NewMockNvpci makes its tree in a fresh directory under os.TempDir(): point that
	// at an empty directory so the tree is its only entry. It lives in the tmpfs just
	// mounted (private to this namespace), so it goes away with the process.
	tmp, err := os.MkdirTemp("/proc/driver", "oracle-sysfs-")
	if err != nil {
		return err
	}
	saved := os.Getenv("TMPDIR")
	os.Setenv("TMPDIR", tmp)
	pci, err := nvpci.NewMockNvpci()
	os.Setenv("TMPDIR", saved)
	if err != nil {
		return err
	}
	n, _ := srv.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, _ := srv.DeviceGetHandleByIndex(i)
		info, _ := d.GetPciInfo()
		if err := pci.AddMockA100(sysfsAddress(info), 0, nil); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(tmp)
	if err != nil || len(entries) != 1 {
		return fmt.Errorf("--fake-host: mock sysfs tree not found in %s", tmp)
	}
	root := filepath.Join(tmp, entries[0].Name())
	if err := syscall.Mount(root, "/sys/bus/pci/devices", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("--fake-host: bind mount the mock sysfs on /sys/bus/pci/devices: %v", err)
	}
	return nil
}

// sysfsAddress is the bus id as sysfs names it: NVML's 8-digit PCI domain cut to 4.
func sysfsAddress(info nvml.PciInfo) string {
	var b []byte
	for _, c := range info.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return strings.TrimPrefix(strings.ToLower(string(b)), "0000")
}

// writeMigMinors writes /proc/driver/nvidia-caps/mig-minors (format: NVIDIA's MIG user
// guide, "/proc/driver/nvidia-caps/mig-minors"; parser: internal/mig/mig-dp.go) listing
// the GI and CI access files of every MIG device of the mock.
func writeMigMinors(srv nvml.Interface) error {
	var lines []string
	minor := 1
	n, _ := srv.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, _ := srv.DeviceGetHandleByIndex(i)
		max, ret := d.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		gpuMinor, _ := d.GetMinorNumber()
		for j := 0; j < max; j++ {
			m, ret := d.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			gi, _ := m.GetGpuInstanceId()
			ci, _ := m.GetComputeInstanceId()
			lines = append(lines,
				fmt.Sprintf("gpu%d/gi%d/access %d", gpuMinor, gi, minor),
				fmt.Sprintf("gpu%d/gi%d/ci%d/access %d", gpuMinor, gi, ci, minor+1))
			minor += 2
		}
	}
	sort.Strings(lines)
	dir := "/proc/driver/nvidia-caps"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "mig-minors"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
