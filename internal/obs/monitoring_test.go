package obs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The shipped alert rules and dashboard (packaging/, installed under
// /usr/share/trellara) must reference only metrics and labels the
// registries export: a renamed metric would otherwise leave an alert that
// can never fire.
const (
	alertsFile    = "../../packaging/prometheus/trellara-alerts.yml"
	dashboardFile = "../../packaging/grafana/trellara-dashboard.json"
)

var (
	// quoted strips string literals (label values, regexes) before
	// identifiers are looked at.
	quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	// metricName finds the names of our series and of the process-level
	// collectors we export; other identifiers are PromQL functions,
	// keywords or label names.
	metricName = regexp.MustCompile(`\b(?:trellara|go|process)_[a-zA-Z0-9_:]*`)
	// labelLists finds matcher blocks {a="x", b=~"y"} and grouping
	// clauses by (a, b) / on (a) / without (...) / ignoring (...).
	matcherBlock = regexp.MustCompile(`\{([^}]*)\}`)
	matcherName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingList = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	// annotationLabel finds {{ $labels.x }} in alert annotations.
	annotationLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// allowedLabels: the contract's, trellara_build_info's, a histogram's le,
// and the target labels Prometheus adds to every scraped series.
var allowedLabels = append(slices.Clone(Labels), "le", "version", "commit", "go_version", "instance", "job")

// checkPromQL returns what in expr is not in the contract: unknown metric
// names and unknown label names.
func checkPromQL(expr string, names []string) []string {
	var problems []string
	e := quoted.ReplaceAllString(expr, `""`)
	for _, n := range metricName.FindAllString(e, -1) {
		if !slices.Contains(names, n) {
			problems = append(problems, "unknown metric "+n)
		}
	}
	var labels []string
	for _, m := range matcherBlock.FindAllStringSubmatch(e, -1) {
		for _, l := range matcherName.FindAllStringSubmatch(m[1], -1) {
			labels = append(labels, l[1])
		}
	}
	for _, m := range groupingList.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	for _, l := range labels {
		if !slices.Contains(allowedLabels, l) {
			problems = append(problems, "unknown label "+l)
		}
	}
	return problems
}

// The check itself must catch a misspelt metric and a label of the old
// contract, or the two tests below prove nothing.
func TestCheckPromQLCatchesMistakes(t *testing.T) {
	names, err := ContractNames()
	if err != nil {
		t.Fatal(err)
	}
	for expr, want := range map[string]string{
		`rate(trellara_applier_transactions_aplied_total[5m])`:                   "unknown metric trellara_applier_transactions_aplied_total",
		`trellara_applier_lag_seconds{dataset="x"} > 300`:                        "unknown label dataset",
		`sum by (le, source) (rate(trellara_applier_apply_latency_seconds[5m]))`: "unknown metric trellara_applier_apply_latency_seconds",
		`trellara_relay_acknowledged_lsn > 0`:                                    "unknown metric trellara_relay_acknowledged_lsn",
	} {
		if p := checkPromQL(expr, names); !slices.Contains(p, want) {
			t.Errorf("%s: problems %v, want %q among them", expr, p, want)
		}
	}
	good := `histogram_quantile(0.99, sum by (le, source_id, dataset_id) (rate(trellara_applier_apply_latency_seconds_bucket{source_id=~"$source_id", dataset_id=~".*"}[5m])))`
	if p := checkPromQL(good, names); len(p) != 0 {
		t.Errorf("%s: %v", good, p)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRulesUseContractMetrics(t *testing.T) {
	names, err := ContractNames()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: a rule without alert name or expr: %+v", alertsFile, r)
			}
			if !metricName.MatchString(r.Expr) {
				t.Errorf("%s: %s uses no Trellara metric: %s", alertsFile, r.Alert, r.Expr)
			}
			for _, p := range checkPromQL(r.Expr, names) {
				t.Errorf("%s: %s: %s in %s", alertsFile, r.Alert, p, r.Expr)
			}
			if s := r.Labels["severity"]; s != "page" && s != "warning" {
				t.Errorf("%s: %s: severity %q, want page or warning", alertsFile, r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: %s needs a summary and a description", alertsFile, r.Alert)
			}
			for _, a := range r.Annotations {
				for _, m := range annotationLabel.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(allowedLabels, m[1]) {
						t.Errorf("%s: %s: annotation uses unknown label %s", alertsFile, r.Alert, m[1])
					}
				}
			}
		}
	}
	for _, want := range []string{"TrellaraComponentDown", "TrellaraApplierLagHigh", "TrellaraSlotRetainedWALHigh",
		"TrellaraQuarantineOpen", "TrellaraRestartsRising"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s lacks the %s alert (has %v)", alertsFile, want, alerts)
		}
	}
}

func TestDashboardUsesContractMetrics(t *testing.T) {
	names, err := ContractNames()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	// Every query string anywhere in the dashboard: panel targets (expr)
	// and template variables (query, definition).
	var queries []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					queries = append(queries, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	used := map[string]bool{}
	for _, q := range queries {
		for _, p := range checkPromQL(q, names) {
			t.Errorf("%s: %s in %s", dashboardFile, p, q)
		}
		for _, n := range metricName.FindAllString(quoted.ReplaceAllString(q, `""`), -1) {
			used[n] = true
		}
	}
	// The dashboard shows every trellara_* series an operator pages on.
	for _, n := range names {
		if strings.HasPrefix(n, "trellara_") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") && !used[n] {
			t.Errorf("%s does not show %s", dashboardFile, n)
		}
	}
	if len(queries) < 10 {
		t.Fatalf("%s: only %d queries found", filepath.Base(dashboardFile), len(queries))
	}
}

// docs/METRICS.md documents exactly the contract's trellara_* metrics.
func TestMetricsDocMatchesContract(t *testing.T) {
	names, err := ContractNames()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(trellara_[a-z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	exported := map[string]bool{"trellara_build_info": true} // documented in prose: its labels differ
	for _, n := range names {
		if !strings.HasPrefix(n, "trellara_") {
			continue
		}
		// A histogram is documented by its name, not its three series.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(names, base+"_bucket") {
				n = base
			}
		}
		exported[n] = true
		if !documented[n] && n != "trellara_build_info" {
			t.Errorf("docs/METRICS.md has no table row for %s", n)
		}
	}
	for _, m := range regexp.MustCompile("`(trellara_[a-z0-9_]+)").FindAllStringSubmatch(string(b), -1) {
		if !exported[m[1]] {
			t.Errorf("docs/METRICS.md names %s, which is not exported", m[1])
		}
	}
}
