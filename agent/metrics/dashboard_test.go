package metrics

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Grafana dashboard in docs/ is held to the shape of Grafana's classic
// dashboard JSON model (the one grafana.com's dashboard collection and
// "Import dashboard" take; dashboard_kind.cue in Grafana's source), and
// every query in it to the metrics this package exports.

type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Time          struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []json.RawMessage `json:"list"`
	} `json:"annotations"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         *int   `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct {
		H, W, X, Y *int
	} `json:"gridPos"`
	Targets []struct {
		RefID  string `json:"refId"`
		Expr   string `json:"expr"`
		Format string `json:"format"`
	} `json:"targets"`
	FieldConfig *struct {
		Defaults  map[string]any `json:"defaults"`
		Overrides []any          `json:"overrides"`
	} `json:"fieldConfig"`
	Panels []any `json:"panels"` // rows only
}

// panelTypes are Grafana's built-in panel plugins the dashboard may use.
var panelTypes = []string{"row", "stat", "table", "timeseries", "gauge", "bargauge", "heatmap", "state-timeline"}

func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-dibs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&d); err != nil {
		t.Fatalf("docs/grafana-dibs.json is not JSON a dashboard can be read from: %v", err)
	}
	if n := len(d.UID); n < 8 || n > 40 {
		t.Errorf("uid %q: Grafana wants 8 to 40 characters", d.UID)
	}
	if d.Title == "" || d.SchemaVersion < 36 || d.Time.From == "" || d.Time.To == "" || len(d.Annotations.List) == 0 {
		t.Errorf("dashboard header: title %q, schemaVersion %d (want ≥ 36, datasource objects), time %+v", d.Title, d.SchemaVersion, d.Time)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["node"] != "query" {
		t.Errorf("template variables = %v, want a datasource picker and a node query", vars)
	}

	exported := exportedNames()
	ids := map[int]bool{}
	type box struct{ x, y, w, h int }
	var boxes []box
	for _, p := range d.Panels {
		name := p.Title
		if p.ID == nil || ids[*p.ID] {
			t.Errorf("panel %q: id missing or not unique", name)
		} else {
			ids[*p.ID] = true
		}
		if !slices.Contains(panelTypes, p.Type) {
			t.Errorf("panel %q: type %q is not a Grafana panel plugin", name, p.Type)
		}
		g := p.GridPos
		if g == nil || g.H == nil || g.W == nil || g.X == nil || g.Y == nil {
			t.Errorf("panel %q: gridPos needs h, w, x and y", name)
			continue
		}
		b := box{*g.X, *g.Y, *g.W, *g.H}
		if b.h <= 0 || b.w <= 0 || b.w > 24 || b.x < 0 || b.x+b.w > 24 || b.y < 0 {
			t.Errorf("panel %q: gridPos %+v leaves the 24-column grid", name, b)
		}
		for _, o := range boxes {
			if b.x < o.x+o.w && o.x < b.x+b.w && b.y < o.y+o.h && o.y < b.y+b.h {
				t.Errorf("panel %q at %+v overlaps the panel at %+v", name, b, o)
			}
		}
		boxes = append(boxes, b)
		if p.Type == "row" {
			if p.Panels == nil || len(p.Targets) > 0 {
				t.Errorf("row %q: a row has panels (empty when expanded) and no queries", name)
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", name, p.Datasource)
		}
		if p.FieldConfig == nil || p.FieldConfig.Defaults == nil || p.FieldConfig.Overrides == nil {
			t.Errorf("panel %q: fieldConfig needs defaults and overrides", name)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", name)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", name, q.RefID)
			}
			refs[q.RefID] = true
			if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || strings.Count(q.Expr, "{") != strings.Count(q.Expr, "}") {
				t.Errorf("panel %q: unbalanced query %q", name, q.Expr)
			}
			for _, m := range regexp.MustCompile(`\bdibs_[a-z_]+`).FindAllString(q.Expr, -1) {
				if !exported[m] {
					t.Errorf("panel %q queries %s, which no agent exports", name, m)
				}
			}
		}
	}
}

// exportedNames are the series names an agent's /metrics can hold.
func exportedNames() map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, d := range allDescs {
		out[re.FindStringSubmatch(d.String())[1]] = true
	}
	for _, h := range []string{"dibs_api_request_duration_seconds", "dibs_queue_wait_seconds"} {
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			out[h+s] = true
		}
	}
	return out
}
