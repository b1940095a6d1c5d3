// Package netlab builds a private network of Linux network namespaces for
// gridnode processes, whose links can be cut: the failover tests and the
// chaos tool run their nodes in one.
//
// A Lab is a bridge namespace holding bridges, one namespace per node with
// a veth ("eth0") whose peer is a port of a bridge, and a veth from the
// root namespace to the first bridge, so that the caller's clients reach
// the nodes. Its addresses are one /24 of 10.0.0.0/8 not used in the root
// namespace; nothing is routed off the machine (the bridges have no
// uplink). Three kinds of cut, each silent where the kernel allows it:
//
//   - Isolate takes a node's bridge port down: packets to and from it are
//     dropped silently, as on a cut link, while its own interface stays up;
//   - Split moves the ports of each group but the first onto a bridge of
//     its own: the groups cannot reach one another, and the caller stays
//     with the first group;
//   - Cut adds a blackhole route in one node's namespace: it can no longer
//     send to another node (its sends fail locally), while that node's
//     packets still reach it: a one-way cut.
//
// Heal undoes all three. It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN
// for ip netns) and the ip command; New says why when it cannot. Close
// removes everything it made; Sweep removes the namespaces of labs whose
// process is gone.
package netlab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Hosts in a Lab's subnet.
const (
	clientHost = 254 // the root namespace's address
	nodeHost   = 1   // node i is nodeHost+i
)

// prefix names every namespace a Lab makes, followed by the pid of the
// process that made it (Sweep reads it back).
const prefix = "gridlab-"

// ErrUnavailable is returned by New when namespaces cannot be made here.
var ErrUnavailable = errors.New("netlab: network namespaces are not available")

// Lab is a private network for n nodes. Its methods are safe for
// concurrent use.
type Lab struct {
	subnet  string   // "10.a.b.": addresses are subnet+host
	bridge  string   // the bridges' namespace
	nodes   []string // node i's namespace
	rootDev string   // the root namespace's end of the client's veth

	mu      sync.Mutex
	bridges int             // bridges made: br0 .. br(bridges-1)
	routes  map[[2]int]bool // one-way cuts in place: from, to
}

// New makes a Lab for n nodes. It fails with ErrUnavailable (wrapped, with
// the reason) when the ip command is missing or namespaces cannot be made.
func New(n int) (*Lab, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: no ip command (%v)", ErrUnavailable, err)
	}
	Sweep()
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	tag := fmt.Sprintf("%d-%04x", os.Getpid(), rand.N(1<<16))
	l := &Lab{subnet: subnet, bridge: prefix + tag + "-br",
		rootDev: fmt.Sprintf("gl%d%04x", os.Getpid()%1000000, rand.N(1<<16)), routes: map[[2]int]bool{}}
	if out, err := exec.Command("ip", "netns", "add", l.bridge).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: ip netns add is not permitted here: %v: %s", ErrUnavailable, err, strings.TrimSpace(string(out)))
	}
	if err := l.build(tag, n); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) build(tag string, n int) error {
	cmds := [][]string{
		{"-n", l.bridge, "link", "set", "lo", "up"},
	}
	if err := l.ip(cmds...); err != nil {
		return err
	}
	if err := l.addBridge(); err != nil {
		return err
	}
	for i := range n {
		ns := fmt.Sprintf("%s%s-n%d", prefix, tag, i+1)
		if err := l.ip([]string{"netns", "add", ns}); err != nil {
			return err
		}
		l.nodes = append(l.nodes, ns)
		port := l.port(i)
		if err := l.ip(
			[]string{"link", "add", port, "netns", l.bridge, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", l.bridge, "link", "set", port, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", l.NodeIP(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		); err != nil {
			return err
		}
	}
	return l.ip(
		[]string{"link", "add", l.rootDev, "type", "veth", "peer", "name", "client", "netns", l.bridge},
		[]string{"-n", l.bridge, "link", "set", "client", "master", "br0", "up"},
		[]string{"addr", "add", l.addr(clientHost) + "/24", "dev", l.rootDev},
		[]string{"link", "set", l.rootDev, "up"},
	)
}

// addBridge makes the next bridge, br<k>.
func (l *Lab) addBridge() error {
	name := fmt.Sprintf("br%d", l.bridges)
	if err := l.ip(
		[]string{"-n", l.bridge, "link", "add", name, "type", "bridge"},
		[]string{"-n", l.bridge, "link", "set", name, "up"},
	); err != nil {
		return err
	}
	l.bridges++
	return nil
}

// Nodes is the number of nodes.
func (l *Lab) Nodes() int { return len(l.nodes) }

// NodeIP is node i's address (from 0).
func (l *Lab) NodeIP(i int) string { return l.addr(nodeHost + i) }

// Wrap is the command prefix that runs a program in node i's namespace
// ("ip netns exec" execs the program in place, so the process a caller
// signals is the program itself).
func (l *Lab) Wrap(i int) []string { return []string{"ip", "netns", "exec", l.nodes[i]} }

// Isolate cuts node i off from every other node and from the caller.
func (l *Lab) Isolate(i int) error {
	return l.ip([]string{"-n", l.bridge, "link", "set", l.port(i), "down"})
}

// Split cuts the nodes into groups that cannot reach one another: the
// first group stays on the caller's bridge, each other group gets a bridge
// of its own. Nodes in no group keep their links.
func (l *Lab) Split(groups ...[]int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(groups) > l.bridges {
		if err := l.addBridge(); err != nil {
			return err
		}
	}
	for g, nodes := range groups {
		for _, i := range nodes {
			if err := l.ip([]string{"-n", l.bridge, "link", "set", l.port(i), "master", fmt.Sprintf("br%d", g)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Cut stops node from sending to node to; to still reaches from.
func (l *Lab) Cut(from, to int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.ip([]string{"-n", l.nodes[from], "route", "add", "blackhole", l.NodeIP(to) + "/32"}); err != nil {
		return err
	}
	l.routes[[2]int{from, to}] = true
	return nil
}

// Heal restores every link: every port up on the first bridge, no cut.
func (l *Lab) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i := range l.nodes {
		errs = append(errs, l.ip(
			[]string{"-n", l.bridge, "link", "set", l.port(i), "master", "br0"},
			[]string{"-n", l.bridge, "link", "set", l.port(i), "up"},
		))
	}
	for r := range l.routes {
		errs = append(errs, l.ip([]string{"-n", l.nodes[r[0]], "route", "del", "blackhole", l.NodeIP(r[1]) + "/32"}))
		delete(l.routes, r)
	}
	return errors.Join(errs...)
}

// Close deletes the root namespace's veth (its peer goes with it) and the
// namespaces (their devices go with them), whatever was made.
func (l *Lab) Close() error {
	var errs []error
	if out, err := exec.Command("ip", "link", "del", l.rootDev).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("netlab: ip link del %s: %v: %s", l.rootDev, err, out))
	}
	for _, ns := range append(l.nodes, l.bridge) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("netlab: ip netns del %s: %v: %s", ns, err, out))
		}
	}
	return errors.Join(errs...)
}

// Sweep deletes the namespaces of labs whose process is gone (a test
// binary killed by its timeout, a tool killed with kill -9). Deleting a
// lab's bridge namespace deletes the root namespace's veth too.
func Sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		rest, ok := strings.CutPrefix(name, prefix)
		pid, _, _ := strings.Cut(rest, "-")
		if !ok || pid == "" {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

// freeSubnet picks a 10.a.b.0/24 that no address of the root namespace is
// in (another lab, the machine's own networks).
func freeSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
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
			return subnet, nil
		}
	}
	return "", errors.New("netlab: no free 10.x.y.0/24")
}

func (l *Lab) addr(host int) string { return fmt.Sprintf("%s%d", l.subnet, host) }

// port is node i's port on a bridge, in the bridges' namespace.
func (l *Lab) port(i int) string { return fmt.Sprintf("n%d", i+1) }

// ip runs the ip command once per argument list, stopping at the first
// failure.
func (l *Lab) ip(cmds ...[]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("netlab: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
