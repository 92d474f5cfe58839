package config

import (
	"net"
	"strconv"
)

// ListenAddr is one health-and-metrics address of a flow with the key that
// sets it (run.listen.relay, run.listen.applier, sinks.NAME.listen).
type ListenAddr struct {
	Key  string
	Addr string
}

// ListenAddrs lists the flow's listen addresses: the relay's, then each
// sink's applier.
func (c *Config) ListenAddrs() []ListenAddr {
	out := []ListenAddr{{"run.listen.relay", c.Run.Listen.Relay}}
	for _, s := range c.Sinks {
		key := "run.listen.applier"
		if p := c.SinkPath(s); p != "" {
			key = p + ".listen"
		}
		out = append(out, ListenAddr{key, s.Listen})
	}
	if len(c.Sinks) == 0 {
		out = append(out, ListenAddr{"run.listen.applier", c.Run.Listen.Applier})
	}
	return out
}

// ListenConflict reports whether two listen addresses would take the same
// port: the same port on the same host, or on a wildcard host (":9401",
// 0.0.0.0, [::]), which takes the port on every address.
func ListenConflict(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	if pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb) || (isLoopbackName(ha) && isLoopbackName(hb))
}

func isLoopbackName(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ListenPair is the relay and applier address pair number n of the default
// ports: 9401 and 9402 for n = 0, then 9411 and 9412, 9421 and 9422, ...
// (ten apart, so a flow's further sinks, numbered up from the applier's
// port, stay clear of the next pair).
func ListenPair(host string, n int) Listen {
	return Listen{
		Relay:   net.JoinHostPort(host, strconv.Itoa(9401+10*n)),
		Applier: net.JoinHostPort(host, strconv.Itoa(9402+10*n)),
	}
}
