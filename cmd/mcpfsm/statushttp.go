package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// This file is the status server of mcpfsm run (and mcpfsm serve): --http-status ADDR
// serves a Manager's status as JSON (/status), its metrics as Prometheus text
// (/metrics, through the OpenTelemetry Prometheus exporter), and a page for people
// (/) that shows every server on its lifecycle picture and follows it live.
//
// A command uses it in three steps: statusFlags.add registers the flags; newStatusServer
// listens (so that a bad address fails before any connection is opened) and makes the
// MeterProvider to give the Manager (ManagerOptions.MeterProvider); Serve starts
// serving the Manager; Close stops.

// statusFlags are the flags of the status server.
type statusFlags struct {
	addr   string
	remote bool
}

func (f *statusFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "http-status", "", "serve the status page, /status (JSON) and /metrics (Prometheus) on `ADDR` (host:port; :port is 127.0.0.1:port; port 0 picks a free one)")
	fs.BoolVar(&f.remote, "http-status-remote", false, "let --http-status listen on an address other than loopback (the page and /status are not authenticated)")
}

// statusHistory is how many of a server's latest transitions the page lists.
const statusHistory = 12

// A statusServer serves a Manager's status over HTTP.
type statusServer struct {
	ln       net.Listener
	srv      *http.Server
	meter    *sdkmetric.MeterProvider
	metrics  http.Handler
	loopback bool
	m        *mcpfsm.Manager
	done     chan error
}

// newStatusServer listens on the address of f and makes the meter provider behind
// /metrics; nil, nil if f asks for no status server. An address that is not loopback
// is refused unless f.remote.
func newStatusServer(f *statusFlags) (*statusServer, error) {
	if f.addr == "" {
		return nil, nil
	}
	addr, loopback, err := statusAddr(f.addr)
	if err != nil {
		return nil, err
	}
	if !loopback && !f.remote {
		return nil, fmt.Errorf("--http-status %s: not a loopback address; the status page is not authenticated, so pass --http-status-remote to serve it there anyway", f.addr)
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("the Prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-status: %w", err)
	}
	return &statusServer{
		ln: ln, loopback: loopback, done: make(chan error, 1),
		meter:   sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// statusAddr resolves ADDR as the status server listens on it: a missing host is
// 127.0.0.1; it reports whether the address is loopback ("localhost" or a loopback
// IP; a host name is looked up by nothing, and so is not).
func statusAddr(addr string) (string, bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("--http-status %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	return net.JoinHostPort(host, port), host == "localhost" || ip != nil && ip.IsLoopback(), nil
}

// MeterProvider is the provider to give the Manager, whose metrics /metrics shows.
func (s *statusServer) MeterProvider() metric.MeterProvider { return s.meter }

// URL is the page's address.
func (s *statusServer) URL() string { return "http://" + s.ln.Addr().String() + "/" }

// Serve starts serving m's status, in the background.
func (s *statusServer) Serve(m *mcpfsm.Manager) {
	s.m = m
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /view", s.view)
	mux.HandleFunc("GET /status", s.status)
	mux.Handle("GET /metrics", s.metrics)
	mux.HandleFunc("GET /page.js", static("text/javascript; charset=utf-8", pageJS))
	mux.HandleFunc("GET /page.css", static("text/css; charset=utf-8", pageCSS))
	s.srv = &http.Server{
		Handler:           s.guard(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       statusReadTimeout,
		WriteTimeout:      statusWriteTimeout,
		IdleTimeout:       idleTimeout,
	}
	go func() { s.done <- s.srv.Serve(s.ln) }()
}

// statusReadTimeout bounds the reading of a request to the status server, its body
// included, and statusWriteTimeout the writing of its answer. No handler reads a
// body, but Go's server reads up to 256 KiB of one before it answers (to keep the
// connection): a GET declaring a body it never sent held its answer and its
// connection for ever. A client that never reads its answers (pipelined requests
// for the page) held its connection, blocked on a write, for ever, and with it Close.
// The status server has no long-lived answer (no stream), so the server's own
// timeouts do it. Variables for tests.
var (
	statusReadTimeout  = 10 * time.Second
	statusWriteTimeout = 30 * time.Second
)

// Close stops serving (and closes the listener of a server never served), and shuts
// the meter provider down. Requests still in flight when ctx ends are cut (their
// connections closed), so that nothing of the server outlives Close; that is not an
// error.
func (s *statusServer) Close(ctx context.Context) error {
	var err error
	if s.srv != nil {
		if serr := s.srv.Shutdown(ctx); serr != nil {
			_ = s.srv.Close()
		}
		if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	} else {
		err = s.ln.Close()
	}
	return errors.Join(err, s.meter.Shutdown(ctx))
}

// guard refuses, on a loopback listener, requests whose Host is not loopback: a web
// page elsewhere could otherwise point a name of its own at 127.0.0.1 (DNS rebinding)
// and read the status from the user's browser. Every answer forbids framing and
// loading anything from elsewhere.
func (s *statusServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.loopback {
			host := r.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if ip := net.ParseIP(strings.Trim(host, "[]")); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				http.Error(w, "this status server answers requests for localhost only", http.StatusMisdirectedRequest)
				return
			}
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func static(ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write([]byte(body))
	}
}

// statusDoc is what /status answers: every server's status, in config order.
type statusDoc struct {
	Time    time.Time       `json:"time"`
	Servers []mcpfsm.Status `json:"servers"`
}

func (s *statusServer) status(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(statusDoc{Time: time.Now(), Servers: s.m.Status()})
}

func (s *statusServer) page(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	view, err := s.render()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = pageTemplate.Execute(w, template.HTML(view))
}

// view answers the page's polls: the servers' part of the page, rendered anew.
func (s *statusServer) view(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	view, err := s.render()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte(view))
}

// serverView is one server as the page shows it.
type serverView struct {
	mcpfsm.Status
	Now     time.Time
	Picture template.HTML
	History []machine.Transition // newest first
}

func (s *statusServer) render() (string, error) {
	now := time.Now()
	var views []serverView
	for _, st := range s.m.Status() {
		v := serverView{Status: st, Now: now}
		if c := s.m.Conn(st.Server); c != nil {
			hist := c.History()
			path := hist[max(0, len(hist)-statusHistory):]
			v.Picture = template.HTML(pictureOf(c.Spec()).svg(st.State, path))
			v.History = slices.Clone(path)
			slices.Reverse(v.History)
		}
		views = append(views, v)
	}
	var b strings.Builder
	err := viewTemplate.Execute(&b, struct {
		Now     time.Time
		Servers []serverView
	}{now, views})
	return b.String(), err
}

// ago renders how long before now t was, for people: "3.2s ago", "in 12s".
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + roundHuman(-d)
	}
	return roundHuman(d) + " ago"
}

func roundHuman(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// kind is a state's class on the page: how it stands for calls.
func kind(st mcpfsm.Status) string {
	switch {
	case st.ActionNeeded:
		return "action"
	case st.Calls == machine.Serve:
		return "serving"
	case st.Calls == machine.FailFast:
		return "failing"
	case st.Calls == 0:
		return "closed"
	}
	return "waiting"
}

var funcs = template.FuncMap{
	"ago":  ago,
	"kind": kind,
	"clock": func(t time.Time) string {
		return t.Format("15:04:05.000")
	},
	"round": func(d time.Duration) string { return roundHuman(d) },
	"err":   func(err error) string { return machine.ErrorText(err) },
	"cause": func(c states.Cause) string {
		if c == states.CauseNone {
			return ""
		}
		return c.String()
	},
}

var pageTemplate = template.Must(template.New("page").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mcpfsm status</title>
<link rel="stylesheet" href="/page.css">
<script src="/page.js" defer></script>
</head>
<body>
<header><h1>mcpfsm</h1><span id="live" class="live">live</span></header>
<main id="servers">{{.}}</main>
<footer>Each server on its lifecycle: <span class="key current">current state</span> <span class="key visited">recently visited</span> <span class="key taken">recent transitions</span>. Dashed edges are timed; faint ones are taken on close. JSON at <a href="/status">/status</a>, Prometheus metrics at <a href="/metrics">/metrics</a>.</footer>
</body>
</html>
`))

var viewTemplate = template.Must(template.New("view").Funcs(funcs).Parse(`<p class="updated" data-time="{{.Now.UnixMilli}}">updated {{clock .Now}}</p>
{{range .Servers}}<section class="server {{kind .Status}}" id="server-{{.Server}}" data-server="{{.Server}}" data-state="{{.State}}">
<h2><span class="name">{{.Server}}</span> <span class="badge">{{.State}}</span> <span class="transport">{{.Transport}}</span></h2>
<div class="body">
<dl>
<dt>state</dt><dd>{{.State}} for {{round (.Now.Sub .Since)}}{{if .Calls}} · calls {{.Calls}}{{end}}</dd>
{{if .ActionNeeded}}<dt>action</dt><dd class="action">{{.Action}}</dd>{{end}}
<dt>last success</dt><dd>{{with .LastSuccess}}{{.What}} {{ago $.Now .At}}{{else}}none yet{{end}}</dd>
<dt>last failure</dt><dd>{{with .LastFailure}}<span class="cause">{{.Cause}}</span> {{ago $.Now .At}}: <span class="message">{{.Message}}</span>{{else}}none{{end}}</dd>
<dt>failures</dt><dd>{{.Failures}} counted; the breaker opens at {{.BreakerThreshold}}</dd>
<dt>next</dt><dd>{{with .Next}}{{.What}} {{ago $.Now .At}}{{else}}nothing scheduled{{end}}</dd>
{{with .Session}}<dt>session</dt><dd>{{with .Server.Implementation}}{{.Name}} {{.Version}} · {{end}}{{if .ID}}id {{.ID}} · {{end}}{{with .Server.ProtocolVersion}}protocol {{.}} · {{end}}up {{round .Age}} · {{.InFlight}} in flight</dd>{{end}}
</dl>
<div class="picture">{{.Picture}}</div>
</div>
<details class="history" open><summary>recent transitions</summary>
<table>{{range .History}}<tr><td class="time">{{clock .At}}</td><td>{{.From}} → {{.To}}</td><td>{{.Trigger}}</td><td>{{with cause .Cause}}<span class="cause">{{.}}</span>{{end}}{{with err .Err}} <span class="message">{{.}}</span>{{end}}</td></tr>
{{end}}</table></details>
</section>
{{end}}`))

//go:embed statushttp.js
var pageJS string

//go:embed statushttp.css
var pageCSS string
