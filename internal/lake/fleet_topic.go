package lake

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trellara/trellara/internal/config"
)

// topicSourceKeys are the keys of a source named by its topic instead of
// a flow config: what the committer needs of a flow whose relay runs
// elsewhere, with nothing of the relay's own settings.
var topicSourceKeys = []string{"id", "flow", "environment", "topic", "kafka", "database_url", "slot", "tables"}

// topicFlow is the flow config of a source named by topic (sources[i]
// without config): the same trellara.yml keys, gathered from the entry,
// decoded and validated by trellara.yml's own rules (config.Parse), so a
// topic-named source and a flow-config source mean the same thing. Errors
// are reported under the entry's own keys (sources[i].kafka.brokers, not
// transport.kafka.brokers).
func (d *fleetDecoder) topicFlow(p string, n *yaml.Node, keys map[string]*yaml.Node) *config.Config {
	missing := false
	for _, k := range []string{"id", "kafka", "database_url", "tables"} {
		if keys[k] == nil {
			d.fail(p+"."+k, n, "add it: a source named by topic needs id, kafka (brokers, mode, partitions, tls, sasl as in trellara.yml's transport.kafka), database_url and tables; or name its flow config with config:", "required")
			missing = true
		}
	}
	if missing {
		return nil
	}
	kafka := keys["kafka"]
	if kafka.Kind != yaml.MappingNode {
		d.fail(p+".kafka", kafka, "write it as a mapping, as trellara.yml's transport.kafka", "must be a mapping")
		return nil
	}
	scalar := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }
	mapping := func(kv ...any) *yaml.Node {
		m := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i+1 < len(kv); i += 2 {
			if v, _ := kv[i+1].(*yaml.Node); v != nil {
				m.Content = append(m.Content, scalar(kv[i].(string)), v)
			}
		}
		return m
	}
	flowName := keys["flow"]
	if flowName == nil {
		flowName = keys["id"]
	}
	k := &yaml.Node{Kind: yaml.MappingNode, Content: append([]*yaml.Node(nil), kafka.Content...)}
	if t := keys["topic"]; t != nil {
		for i := 0; i+1 < len(kafka.Content); i += 2 {
			if kafka.Content[i].Value == "topic" {
				d.fail(p+".topic", t, "keep one: topic or kafka.topic", "the topic is named twice")
				return nil
			}
		}
		k.Content = append(k.Content, scalar("topic"), t)
	}
	doc := mapping("version", scalar("2"), "environment", keys["environment"], "flow", flowName,
		"source", mapping("id", keys["id"], "database_url", keys["database_url"], "slot", keys["slot"], "tables", keys["tables"]),
		"transport", mapping("kafka", k))
	data, err := yaml.Marshal(doc)
	if err != nil {
		d.fail(p, n, "write the entry's values as YAML scalars, lists and mappings", "cannot be read as a flow: %v", err)
		return nil
	}
	fc, err := config.Parse(data)
	if err != nil {
		probs, ok := config.Problems(err)
		if !ok {
			d.fail(p, n, "fix the entry", "%v", err)
			return nil
		}
		for _, e := range probs {
			d.errs = append(d.errs, config.FieldError{Path: topicKey(p, e.Path), Line: n.Line, Message: strings.ReplaceAll(e.Message, e.Path, topicKey(p, e.Path)), Fix: e.Fix, Err: e.Err})
		}
		return nil
	}
	return fc
}

// topicKey maps a trellara.yml key path of a topic-named source's flow to
// the fleet.yml key the user wrote.
func topicKey(p, path string) string {
	for _, m := range [][2]string{{"transport.kafka.topic", ".topic"}, {"transport.kafka", ".kafka"}, {"source", ""}, {"flow", ".flow"}, {"environment", ".environment"}} {
		if path == m[0] || strings.HasPrefix(path, m[0]+".") || strings.HasPrefix(path, m[0]+"[") {
			return p + m[1] + strings.TrimPrefix(path, m[0])
		}
	}
	if path == "" {
		return p
	}
	return p + " (" + path + ")"
}
