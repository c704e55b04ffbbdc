// Package e2e is the upstream e2e suite focused on sig-network: the
// NetworkPolicy tests (test/e2e/network/netpol, through test/e2e/network) and
// the network conformance tests (Networking Granular Checks: Pods, Services,
// hostPort), run against scripts/cluster.sh's cluster. Only the test sources
// of test/e2e/network and test/e2e/auth (for its by-node admission policy
// spec; the network runs select [sig-network]) are linked in; the flags and the suite's main are
// upstream's (test/e2e/e2e_test.go's TestMain, trimmed to what this needs).
//
// Built by scripts/k8s-build.sh into build-k8s/bin/e2e-network.test.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/component-base/version"
	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"
	// test sources: sig-network, with the NetworkPolicy suite (netpol)
	_ "k8s.io/kubernetes/test/e2e/network"
	// and sig-auth, for "ValidatingAdmissionPolicy can restrict access
	// by-node" (per_node_update.go: the pattern of deploy/weftd-own-node.yaml)
	_ "k8s.io/kubernetes/test/e2e/auth"
	// reconfigure framework
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	showVersion := flag.CommandLine.Bool("version", false, "Displays version information.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
