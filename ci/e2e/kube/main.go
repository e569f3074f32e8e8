// Command kube is a multi-call binary (like the retired hyperkube) holding the three
// control-plane components of k8s.io/kubernetes. One process runs exactly one component,
// so feature gates, flag sets and metric registries are never shared; one binary shares
// the compile and link work of the common packages.
//
// Usage: kube kube-apiserver|kube-controller-manager|kube-scheduler [flags]
// (or call it through a symlink named after the component).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones (as upstream cmd/kube-controller-manager)

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": kcm.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && len(os.Args) > 1 {
		// "kube <component> flags...": drop the component so cobra sees only its flags.
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube kube-apiserver|kube-controller-manager|kube-scheduler [flags]")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
