// Package grafana holds the Grafana dashboard of Tessera's metrics
// (tessera.json, importable as is) and lists the metrics it reads, so that
// tests can check each one is a metric the components export.
package grafana

import (
	_ "embed"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

//go:embed tessera.json
var dashboard []byte

// metricName matches the names of Tessera's and the Temporal SDK's
// metrics in a PromQL expression.
var metricName = regexp.MustCompile(`\b(?:tessera|temporal)_[a-z0-9_]+`)

// Metrics returns the metric families the dashboard's expressions read
// (a histogram's _bucket, _sum and _count series named by the family),
// sorted.
func Metrics() ([]string, error) {
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			for _, name := range metricName.FindAllString(t.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					name = strings.TrimSuffix(name, suffix)
				}
				seen[name] = true
			}
		}
	}
	var out []string
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}
