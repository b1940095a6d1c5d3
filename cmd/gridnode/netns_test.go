package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is a private network for gridnode processes, made of network
// namespaces that exist only for one test: a bridge in a namespace of its
// own, one namespace per node with a veth ("eth0") whose peer is a port of
// the bridge, and a veth from the root namespace to the bridge, so that
// the test's client reaches the nodes. Its addresses are one /24 of
// 10.0.0.0/8 not used in the root namespace; nothing is routed off the
// machine (the bridge has no uplink). Isolating a node takes its bridge
// port down: packets to and from it are dropped silently, as on a cut
// link, while its own interface stays up.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for ip netns); newNetLab
// skips the test otherwise. Everything it creates is removed in Cleanup,
// after the processes started later (Cleanup runs last in, first out).
type netLab struct {
	tb      testing.TB
	subnet  string   // "10.a.b.": addresses are subnet+host
	bridge  string   // the bridge's namespace
	nodes   []string // node i's namespace
	rootDev string   // the root namespace's end of the client's veth
}

// Hosts in a netLab's subnet.
const (
	labClientHost = 254 // the root namespace's address
	labNodeHost   = 1   // node i is labNodeHost+i
)

// newNetLab creates a netLab for n nodes, or skips tb when network
// namespaces cannot be made here.
func newNetLab(tb testing.TB, n int) *netLab {
	tb.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skipf("isolation needs network namespaces: no ip command (%v)", err)
	}
	sweepLabs(tb)
	tag := fmt.Sprintf("%d-%04x", os.Getpid(), rand.N(1<<16))
	l := &netLab{tb: tb, subnet: freeSubnet(tb), bridge: "gridfo-" + tag + "-br",
		rootDev: fmt.Sprintf("gf%d%04x", os.Getpid()%1000000, rand.N(1<<16))}
	if out, err := exec.Command("ip", "netns", "add", l.bridge).CombinedOutput(); err != nil {
		tb.Skipf("isolation needs network namespaces, and ip netns add is not permitted here: %v: %s", err, out)
	}
	tb.Cleanup(l.remove)
	l.ip("-n", l.bridge, "link", "set", "lo", "up")
	l.ip("-n", l.bridge, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.bridge, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("gridfo-%s-n%d", tag, i+1)
		l.ip("netns", "add", ns)
		l.nodes = append(l.nodes, ns)
		port := l.port(i)
		l.ip("link", "add", port, "netns", l.bridge, "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.ip("-n", l.bridge, "link", "set", port, "master", "br0", "up")
		l.ip("-n", ns, "addr", "add", l.addr(labNodeHost+i)+"/24", "dev", "eth0")
		l.ip("-n", ns, "link", "set", "eth0", "up")
		l.ip("-n", ns, "link", "set", "lo", "up")
	}
	l.ip("link", "add", l.rootDev, "type", "veth", "peer", "name", "client", "netns", l.bridge)
	l.ip("-n", l.bridge, "link", "set", "client", "master", "br0", "up")
	l.ip("addr", "add", l.addr(labClientHost)+"/24", "dev", l.rootDev)
	l.ip("link", "set", l.rootDev, "up")
	return l
}

// sweepLabs deletes the namespaces of labs whose test process is gone (a
// test binary killed by its timeout runs no Cleanup). Deleting a lab's
// bridge namespace deletes the root namespace's veth too.
func sweepLabs(tb testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		rest, ok := strings.CutPrefix(name, "gridfo-")
		pid, _, _ := strings.Cut(rest, "-")
		if !ok || pid == "" {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				tb.Logf("removing the stale namespace %s: %v: %s", name, err, out)
			}
		}
	}
}

// freeSubnet picks a 10.a.b.0/24 that no address of the root namespace is
// in (another test's lab, the machine's own networks).
func freeSubnet(tb testing.TB) string {
	tb.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		tb.Fatal(err)
	}
	for range 100 {
		subnet := fmt.Sprintf("10.%d.%d.", 64+rand.N(128), rand.N(256))
		_, cidr, _ := net.ParseCIDR(subnet + "0/24")
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (cidr.Contains(ipn.IP) || ipn.Contains(cidr.IP)) {
				used = true
			}
		}
		if !used {
			return subnet
		}
	}
	tb.Fatal("no free 10.x.y.0/24 for the test network")
	return ""
}

func (l *netLab) addr(host int) string { return fmt.Sprintf("%s%d", l.subnet, host) }

// port is node i's port on the bridge, in the bridge's namespace.
func (l *netLab) port(i int) string { return fmt.Sprintf("n%d", i+1) }

// nodeIP is node i's address.
func (l *netLab) nodeIP(i int) string { return l.addr(labNodeHost + i) }

// wrap is the command prefix that runs a program in node i's namespace.
func (l *netLab) wrap(i int) []string { return []string{"ip", "netns", "exec", l.nodes[i]} }

// isolate cuts node i off from every other node and from the client.
func (l *netLab) isolate(i int) { l.ip("-n", l.bridge, "link", "set", l.port(i), "down") }

// reconnect undoes isolate.
func (l *netLab) reconnect(i int) { l.ip("-n", l.bridge, "link", "set", l.port(i), "up") }

func (l *netLab) ip(args ...string) {
	l.tb.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the root namespace's veth (its peer goes with it) and the
// namespaces (their devices go with them), whatever was made.
func (l *netLab) remove() {
	if out, err := exec.Command("ip", "link", "del", l.rootDev).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		l.tb.Logf("cleanup: ip link del %s: %v: %s", l.rootDev, err, out)
	}
	for _, ns := range append(l.nodes, l.bridge) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.tb.Logf("cleanup: ip netns del %s: %v: %s", ns, err, out)
		}
	}
}
