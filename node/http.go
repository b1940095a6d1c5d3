package node

import (
	"fmt"
	"github.com/l4xg/grid/api"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics from reg, /healthz, /readyz, the replicas'
// /debug/checksums (an admin's when auth is on) and, with Config.Pprof,
// /debug/pprof/.
func (n *Node) httpHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", n.needRole(api.RoleConsumer, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if n.cluster != nil {
			// Cached by the cluster runtime's replica loop: cheap.
			if ok, why := n.cluster.Readiness(); !ok {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		} else if !n.ready() {
			http.Error(w, "not ready: not every shard has a serving leader", http.StatusServiceUnavailable)
			return
		}
		if err := n.host.ColdHealth(); err != nil {
			http.Error(w, "not ready: cold tier writes failing (applies wait for them): "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/debug/checksums", n.needRole(api.RoleAdmin, http.HandlerFunc(n.serveChecksums)))
	if n.cfg.Pprof {
		mux.Handle("/debug/pprof/", n.needRole(api.RoleAdmin, http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", n.needRole(api.RoleAdmin, http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/trace", n.needRole(api.RoleAdmin, http.HandlerFunc(pprof.Trace)))
		mux.Handle("/debug/pprof/symbol", n.needRole(api.RoleAdmin, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/cmdline", n.needRole(api.RoleAdmin, http.HandlerFunc(pprof.Cmdline)))
	}
	return mux
}

// needRole guards h with a bearer token of at least role need when auth is
// on (for /metrics, unless AuthConfig.MetricsOpen).
func (n *Node) needRole(need api.Role, h http.Handler) http.Handler {
	if n.auth == nil || (need == api.RoleConsumer && n.cfg.Auth.MetricsOpen) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := n.auth.HTTPRole(r.Header.Get("Authorization"), need); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
