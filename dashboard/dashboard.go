// Package dashboard serves fleet's web dashboard: a page and its assets,
// which are public and hold no data, and a JSON API under api/ that reads
// and operates the fleet through the fleet package's Service, for bearers
// of a token (or whatever an app's own Authenticator accepts).
//
// The master serves it on fleet.http.addr under fleet.path; an app mounts
// it on its own mux:
//
//	h := dashboard.New(svc, dashboard.Options{Path: "/admin/fleet"})
//	mux.Handle("/admin/fleet", h)
//	mux.Handle("/admin/fleet/", h)
package dashboard

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

//go:embed assets/index.html assets/fleet.js assets/fleet.css
var assets embed.FS

// DefaultPath is where the dashboard lives when Options.Path is empty
// (fleet.path's default).
const DefaultPath = "/_fleet"

// DefaultRefresh is how often the page refreshes what it shows.
const DefaultRefresh = 5 * time.Second

// Options configure the dashboard.
type Options struct {
	// Path is the URL path the handler is mounted at, without a trailing
	// slash (default DefaultPath). The handler serves Path (the page),
	// Path/assets/... and Path/api/...; mount it for Path and Path/.
	Path string
	// Authenticate decides what a request may do; nil: bearer tokens made
	// by `app fleet:token create` (TokenAuthenticator).
	Authenticate Authenticator
	// Refresh is how often the page refreshes (default DefaultRefresh).
	Refresh time.Duration
	// Logger receives failed requests (never a token); nil: slog's default.
	Logger *slog.Logger
}

// Handler serves the dashboard. Build it with New.
type Handler struct {
	svc     *fleet.Service
	path    string
	auth    Authenticator
	log     *slog.Logger
	page    []byte
	assets  map[string]asset // by file name under Path/assets/
	api     *http.ServeMux   // the API's routes, below Path/api
	refresh time.Duration
}

type asset struct {
	body        []byte
	contentType string
}

var _ http.Handler = (*Handler)(nil)

// New returns the dashboard's handler over svc.
func New(svc *fleet.Service, opts Options) *Handler {
	h := &Handler{
		svc:     svc,
		path:    strings.TrimSuffix(cmp.Or(opts.Path, DefaultPath), "/"),
		auth:    opts.Authenticate,
		log:     cmp.Or(opts.Logger, slog.Default()),
		assets:  map[string]asset{},
		refresh: cmp.Or(opts.Refresh, DefaultRefresh),
	}
	if h.auth == nil {
		h.auth = TokenAuthenticator(svc)
	}
	names := map[string]string{}
	for _, f := range []struct{ file, ext, contentType string }{
		{"assets/fleet.js", "js", "text/javascript; charset=utf-8"},
		{"assets/fleet.css", "css", "text/css; charset=utf-8"},
	} {
		body, err := assets.ReadFile(f.file)
		if err != nil {
			panic(fmt.Sprintf("dashboard: embedded %s: %v", f.file, err)) // the build embeds it
		}
		sum := sha256.Sum256(body)
		name := "fleet-" + hex.EncodeToString(sum[:])[:16] + "." + f.ext
		h.assets[name] = asset{body: body, contentType: f.contentType}
		names[f.ext] = name
	}
	tpl := template.Must(template.ParseFS(assets, "assets/index.html"))
	var page bytes.Buffer
	err := tpl.Execute(&page, map[string]any{
		"CSS": h.path + "/assets/" + names["css"], "JS": h.path + "/assets/" + names["js"],
		"API": h.path + "/api/", "Base": h.path, "Refresh": int(h.refresh / time.Millisecond),
	})
	if err != nil {
		panic(fmt.Sprintf("dashboard: render the page: %v", err)) // a fixed template and plain strings
	}
	h.page = page.Bytes()
	h.api = h.apiMux()
	return h
}

// Path is the URL path the handler serves, without a trailing slash.
func (h *Handler) Path() string { return h.path }

// AssetNames returns the file names the page's assets are served under
// (below Path/assets/), each carrying a hash of its content.
func (h *Handler) AssetNames() []string {
	var out []string
	for name := range h.assets {
		out = append(out, name)
	}
	return out
}

// contentSecurityPolicy lets the page load only its own script and style
// and talk only to its own origin; no inline code, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP routes Path (the page), Path/assets/NAME and Path/api/....
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	rest, ok := strings.CutPrefix(r.URL.Path, h.path)
	switch {
	case !ok:
		http.NotFound(w, r)
	case strings.HasPrefix(rest, "/api/") || rest == "/api":
		h.serveAPI(w, r, strings.TrimPrefix(strings.TrimPrefix(rest, "/api"), "/"))
	case rest == "" || rest == "/":
		if !getOrHead(w, r) {
			return
		}
		hd.Set("Content-Type", "text/html; charset=utf-8")
		hd.Set("Cache-Control", "no-cache")
		_, _ = w.Write(h.page)
	case strings.HasPrefix(rest, "/assets/"):
		a, found := h.assets[strings.TrimPrefix(rest, "/assets/")]
		if !found {
			hd.Set("Cache-Control", "no-store")
			http.NotFound(w, r)
			return
		}
		if !getOrHead(w, r) {
			return
		}
		hd.Set("Content-Type", a.contentType)
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
		_, _ = w.Write(a.body)
	default:
		hd.Set("Cache-Control", "no-store")
		http.NotFound(w, r)
	}
}

// getOrHead answers 405 to anything but GET and HEAD.
func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}
