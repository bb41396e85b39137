package ui

import (
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// FuzzTraceQuery: any query string gives a parsed query within bounds or a query error
// naming one of the query's own parameters; it never panics.
func FuzzTraceQuery(f *testing.F) {
	for _, q := range []string{
		"from=pod:default/client&to=my-service:80",
		"from=pod:default/client&to=service:default/my-service:80&mode=ipvs&all_branches=true&reply=1&after_step=3&format=page",
		"from=node:node-a&to=10.96.0.1:443&port=443&proto=udp",
		"to=x&from=",
		"from=a&to=b&port=65536",
		"from=a&to=b&x=1&x=2",
		"%zz",
	} {
		f.Add(q)
	}
	srv := demoServer(f)
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/api/trace", nil)
		r.URL.RawQuery = raw
		q, err := srv.ParseTraceQuery(r)
		if err != nil {
			var qe *queryError
			if !errors.As(err, &qe) || !strings.HasPrefix(err.Error(), qe.field+": ") {
				t.Fatalf("%q: %v is not a query error naming its field", raw, err)
			}
			if _, ok := r.URL.Query()[qe.field]; !ok && !slices.Contains(traceParams, qe.field) {
				t.Fatalf("%q: the error names %q, which the query does not have", raw, qe.field)
			}
			return
		}
		o := q.Opts
		if o.From == "" || o.To == "" || o.Port < 0 || o.Port > 65535 || o.AfterStep < 0 || o.AfterStep > len(srv.view.Steps) ||
			(o.Mode != "" && !slices.Contains(srv.view.Modes, o.Mode)) || !slices.Contains([]string{"json", "text", "svg", "page"}, q.Format) {
			t.Fatalf("%q: parsed out of bounds: %+v", raw, q)
		}
	})
}
