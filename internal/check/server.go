package check

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ServerInfo identifies the inspected server.
type ServerInfo struct {
	Version    string     `json:"version"`
	VersionNum int        `json:"version_num"`
	Major      int        `json:"major"`
	InRecovery bool       `json:"in_recovery"`
	Database   string     `json:"database"`
	User       string     `json:"user"`
	Providers  []Provider `json:"providers"`
}

// Provider is a managed service recognised from what the role can see.
type Provider struct {
	ID       string   `json:"id"`   // aws-rds, aws-aurora, gcp-cloudsql, gcp-alloydb, azure
	Name     string   `json:"name"` // for people
	Evidence []string `json:"evidence"`
}

func (s ServerInfo) role() string {
	r := "primary"
	if s.InRecovery {
		r = "standby"
	}
	if len(s.Providers) > 0 {
		return r + " · " + s.Providers[0].Name + " (detected)"
	}
	return r + " · self-hosted or unrecognised provider"
}

// Setting is one server setting as pg_settings shows it.
type Setting struct {
	Name    string `json:"name"`
	Value   string `json:"value"`   // current_setting(): with unit, as SHOW prints it
	Setting string `json:"setting"` // pg_settings.setting: in Unit
	Unit    string `json:"unit"`
	Context string `json:"context"` // postmaster = restart needed; sighup = reload
}

// watchedSettings are read when visible. Version-specific ones are simply
// absent on servers that lack them.
var watchedSettings = []string{
	"wal_level", "max_replication_slots", "max_wal_senders", "max_slot_wal_keep_size",
	"wal_sender_timeout", "wal_keep_size", "idle_replication_slot_timeout",
	"sync_replication_slots", "synchronized_standby_slots", "hot_standby_feedback",
	"logical_decoding_work_mem", "output_plugin_libraries", "shared_preload_libraries",
	"block_size", "wal_segment_size", "max_worker_processes", "max_wal_size",
}

// providerPrefixes map setting prefixes to providers. Only settings the
// provider adds are used, so a self-hosted server is never misdetected.
var providerPrefixes = []struct{ prefix, id string }{
	{"rds.", "aws-rds"},
	{"aurora", "aws-aurora"},
	{"apg_", "aws-aurora"},
	{"cloudsql.", "gcp-cloudsql"},
	{"alloydb.", "gcp-alloydb"},
	{"azure.", "azure"},
}

// providerRoles are roles the providers create in every instance.
var providerRoles = map[string]string{
	"rds_superuser":     "aws-rds",
	"rds_replication":   "aws-rds",
	"cloudsqlsuperuser": "gcp-cloudsql",
	"alloydbsuperuser":  "gcp-alloydb",
	"azure_pg_admin":    "azure",
}

var providerNames = map[string]string{
	"aws-rds":      "Amazon RDS",
	"aws-aurora":   "Amazon Aurora",
	"gcp-cloudsql": "Google Cloud SQL",
	"gcp-alloydb":  "Google AlloyDB",
	"azure":        "Azure Database for PostgreSQL",
}

func (in *inspector) server() error {
	s := &in.r.Server
	var readOnly string
	err := in.q.QueryRow(in.ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
		pg_is_in_recovery(), current_user::text, current_database()::text, current_setting('transaction_read_only')`).
		Scan(&s.Version, &s.VersionNum, &s.InRecovery, &s.User, &s.Database, &readOnly)
	if err != nil {
		return &QueryError{What: "server version", Err: err}
	}
	if readOnly != "on" {
		return ErrNotReadOnly
	}
	s.Major = s.VersionNum / 10000
	s.Providers = []Provider{}
	return nil
}

func (in *inspector) settingsRead() error {
	in.settings = map[string]Setting{}
	if err := in.readPluginLibraries(); err != nil {
		return err
	}
	where := "name = ANY($1)"
	for _, p := range providerPrefixes {
		where += " OR name LIKE " + quoteLiteral(strings.ReplaceAll(p.prefix, "_", `\_`)+"%")
	}
	rows, err := in.q.Query(in.ctx, `SELECT name, current_setting(name), setting, coalesce(unit, ''), context
		FROM pg_catalog.pg_settings WHERE `+where+` ORDER BY name`, watchedSettings)
	if err != nil {
		return &QueryError{What: "pg_settings", Err: err}
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Setting, error) {
		var s Setting
		err := row.Scan(&s.Name, &s.Value, &s.Setting, &s.Unit, &s.Context)
		return s, err
	})
	if err != nil {
		return &QueryError{What: "pg_settings", Err: err}
	}
	for _, s := range list {
		in.settings[s.Name] = s
	}
	in.r.Settings = list

	// Roles that only a provider creates: evidence, and later the grants we
	// can suggest.
	rows, err = in.q.Query(in.ctx, `SELECT rolname::text FROM pg_catalog.pg_roles WHERE rolname = ANY($1)`, keys(providerRoles))
	if err != nil {
		return &QueryError{What: "pg_roles", Err: err}
	}
	present, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return &QueryError{What: "pg_roles", Err: err}
	}
	evidence := map[string][]string{}
	var order []string
	addEvidence := func(id, e string) {
		if _, ok := evidence[id]; !ok {
			order = append(order, id)
		}
		evidence[id] = append(evidence[id], e)
	}
	for _, s := range list {
		for _, p := range providerPrefixes {
			if strings.HasPrefix(s.Name, p.prefix) {
				addEvidence(p.id, "setting "+s.Name)
			}
		}
	}
	sort.Strings(present)
	for _, r := range present {
		addEvidence(providerRoles[r], "role "+r)
	}
	// Aurora also carries rds.* settings; prefer the more specific name.
	sort.SliceStable(order, func(i, j int) bool { return order[i] == "aws-aurora" && order[j] != "aws-aurora" })
	for _, id := range order {
		in.r.Server.Providers = append(in.r.Server.Providers, Provider{ID: id, Name: providerNames[id], Evidence: evidence[id]})
	}
	if len(order) > 0 {
		in.provider = order[0]
	}
	return nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (in *inspector) setting(name string) (Setting, bool) {
	s, ok := in.settings[name]
	return s, ok
}

func (in *inspector) intSetting(name string) (int, bool) {
	s, ok := in.settings[name]
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s.Setting)
	return v, err == nil
}

// setAction is the exact change for one setting on this kind of server.
// Managed services refuse ALTER SYSTEM, so they get their own mechanism.
func (in *inspector) setAction(name, value string) string {
	restart := false
	if s, ok := in.settings[name]; ok {
		restart = s.Context == "postmaster"
	} else if name == "wal_level" || name == "max_replication_slots" || name == "max_wal_senders" {
		restart = true
	}
	switch in.provider {
	case "aws-rds", "aws-aurora":
		group := "DB parameter group"
		if in.provider == "aws-aurora" {
			group = "DB cluster parameter group"
		}
		a := fmt.Sprintf("set %s = %s in the instance's %s (RDS does not allow ALTER SYSTEM)", name, value, group)
		if restart {
			a += ", then reboot the instance"
		}
		return a
	case "gcp-cloudsql":
		return fmt.Sprintf("gcloud sql instances patch INSTANCE --database-flags=%s=%s   # list your existing flags too: the option replaces them", name, value)
	case "gcp-alloydb":
		return fmt.Sprintf("gcloud alloydb instances update INSTANCE --cluster=CLUSTER --region=REGION --database-flags=%s=%s   # list your existing flags too", name, value)
	case "azure":
		a := fmt.Sprintf("az postgres flexible-server parameter set --resource-group RG --server-name SERVER --name %s --value %s", name, value)
		if restart {
			a += "\naz postgres flexible-server restart --resource-group RG --name SERVER"
		}
		return a
	}
	a := fmt.Sprintf("ALTER SYSTEM SET %s = %s;", name, value)
	if restart {
		return a + "\n-- then restart PostgreSQL (the setting is read only at server start)"
	}
	return a + "\nSELECT pg_reload_conf();"
}

// settingsRules grades server settings. Slot counts come from slots().
func (in *inspector) settingsRules() {
	sec := in.r.section(SectionSettings)
	var summary []string

	if wl, ok := in.setting("wal_level"); ok {
		summary = append(summary, "wal_level="+wl.Value)
		if wl.Value != "logical" {
			f := Finding{Severity: Critical, Code: "wal_level_not_logical", Section: SectionSettings,
				Title:  fmt.Sprintf("wal_level is %s; logical decoding is off", wl.Value),
				Detail: "Change data capture reads the WAL through a logical replication slot, which needs wal_level = logical. Nothing can be captured until it is changed, and the change needs a restart.",
				Action: in.setAction("wal_level", "logical")}
			switch in.provider {
			case "aws-rds", "aws-aurora":
				f.Action = in.setAction("rds.logical_replication", "1") + ", then reboot the instance"
			case "gcp-cloudsql":
				f.Action = in.setAction("cloudsql.logical_decoding", "on")
			case "gcp-alloydb":
				f.Action = in.setAction("alloydb.logical_decoding", "on")
			}
			if in.r.Server.InRecovery {
				f.Detail += " On a standby, wal_level must be logical on the primary as well."
			}
			in.r.add(f)
		}
	} else {
		in.r.note("wal_level: not visible")
	}
	if in.r.Server.InRecovery && in.r.Server.Major < 16 {
		in.r.add(Finding{Severity: Critical, Code: "standby_decoding_unsupported", Section: SectionSettings,
			Title:  fmt.Sprintf("logical decoding on a standby needs PostgreSQL 16; this standby runs %d", in.r.Server.Major),
			Detail: "Before 16 a logical slot can only be created on the primary.",
			Action: "point trellara at the primary instead (the same checks run there)"})
	}

	maxSlots, okSlots := in.intSetting("max_replication_slots")
	used := len(in.r.Slots)
	if in.r.Scope != nil {
		used += in.r.Scope.OtherSlots // capacity is the server's: every slot uses it
	}
	if okSlots {
		free := maxSlots - used
		summary = append(summary, fmt.Sprintf("slots %d/%d free", max(free, 0), maxSlots))
		sec.Lines = append(sec.Lines, fmt.Sprintf("max_replication_slots  %d (%d in use)", maxSlots, used))
		if free < 1 {
			in.r.add(Finding{Severity: Critical, Code: "no_free_replication_slot", Section: SectionSettings,
				Title:  fmt.Sprintf("no free replication slot (%d of %d in use)", used, maxSlots),
				Detail: "Trellara needs one logical slot; creating it would fail.",
				Action: in.setAction("max_replication_slots", strconv.Itoa(used+4))})
		}
	}
	if maxSenders, ok := in.intSetting("max_wal_senders"); ok {
		free := maxSenders - in.walSenders
		summary = append(summary, fmt.Sprintf("senders %d/%d free", max(free, 0), maxSenders))
		sec.Lines = append(sec.Lines, fmt.Sprintf("max_wal_senders        %d (%d connected)", maxSenders, in.walSenders))
		if free < 1 {
			in.r.add(Finding{Severity: Critical, Code: "no_free_wal_sender", Section: SectionSettings,
				Title:  fmt.Sprintf("no free WAL sender (%d of %d in use)", in.walSenders, maxSenders),
				Detail: "The relay streams through a WAL sender; its connection would be refused.",
				Action: in.setAction("max_wal_senders", strconv.Itoa(in.walSenders+4))})
		}
	}
	if s, ok := in.setting("max_slot_wal_keep_size"); ok {
		sec.Lines = append(sec.Lines, "max_slot_wal_keep_size "+s.Value)
	}
	if s, ok := in.setting("wal_sender_timeout"); ok {
		sec.Lines = append(sec.Lines, "wal_sender_timeout     "+s.Value)
		if d, ok := settingDuration(s.Setting, s.Unit); ok && d == 0 {
			in.r.add(Finding{Severity: Notice, Code: "wal_sender_timeout_disabled", Section: SectionSettings,
				Title:  "wal_sender_timeout is 0: a dead consumer connection keeps its slot active forever",
				Detail: "An active slot is never reported as stalled and its WAL is retained until the TCP connection dies, which can take hours.",
				Action: in.setAction("wal_sender_timeout", "'60s'")})
		}
	}
	if s, ok := in.setting("idle_replication_slot_timeout"); ok {
		sec.Lines = append(sec.Lines, "idle_replication_slot_timeout "+s.Value)
		if d, ok := settingDuration(s.Setting, s.Unit); ok && d > 0 {
			in.r.add(Finding{Severity: Info, Code: "idle_slot_timeout", Section: SectionSettings,
				Title:  "inactive slots are invalidated after " + s.Value,
				Detail: "A consumer stopped for longer than this loses its slot and must be re-seeded. Plan maintenance windows shorter than this."})
		}
	}
	in.failoverRules(sec)
	in.pluginRules(sec, &summary)
	if s, ok := in.setting("logical_decoding_work_mem"); ok {
		sec.Lines = append(sec.Lines, "logical_decoding_work_mem "+s.Value)
	}
	if len(in.r.Server.Providers) > 0 {
		for _, p := range in.r.Server.Providers {
			sec.Lines = append(sec.Lines, fmt.Sprintf("provider               %s (detected from %s)", p.Name, strings.Join(p.Evidence, ", ")))
		}
	} else {
		sec.Lines = append(sec.Lines, "provider               none detected (no rds.*, cloudsql.*, alloydb.* or azure.* settings visible)")
	}
	if len(summary) == 0 {
		summary = append(summary, "not visible")
	}
	sec.Summary = strings.Join(summary, " · ")
}

// failoverRules covers failover slots (17+): on a primary whether any slot is
// marked failover, on a standby whether slots are synchronised at all.
func (in *inspector) failoverRules(sec *Section) {
	if in.r.Server.Major < 17 {
		sec.Lines = append(sec.Lines, "failover slots         not supported before PostgreSQL 17 (a slot does not survive promotion of a standby)")
		return
	}
	enabled := 0
	for _, s := range in.r.Slots {
		if s.Failover != nil && *s.Failover {
			enabled++
		}
	}
	line := fmt.Sprintf("failover slots         supported · %d slot(s) with failover", enabled)
	if s, ok := in.setting("sync_replication_slots"); ok {
		line += " · sync_replication_slots=" + s.Value
		if in.r.Server.InRecovery && s.Value != "on" {
			in.r.add(Finding{Severity: Info, Code: "slot_sync_off", Section: SectionSettings,
				Title:  "this standby does not synchronise failover slots",
				Detail: "After promotion the capture slot would be missing here and the consumer would need a re-seed.",
				Action: in.setAction("sync_replication_slots", "on")})
		}
	}
	sec.Lines = append(sec.Lines, line)
}

// pluginRules reads output_plugin_libraries where the build has it. Newer
// minor releases refuse any output plugin not listed there, even for
// superusers, and older builds refuse to start if it is set, so the fix is
// offered only where the setting exists.
func (in *inspector) pluginRules(sec *Section, summary *[]string) {
	if in.pluginHidden {
		sec.Lines = append(sec.Lines, "output_plugin_libraries not visible to this role")
		return
	}
	if in.pluginValue == nil {
		sec.Lines = append(sec.Lines, "output_plugin_libraries not present in this build (no allow-list: any installed plugin loads)")
		return
	}
	value := in.pluginValue
	allowed := splitList(*value)
	has := func(p string) bool {
		for _, a := range allowed {
			if a == p || a == "*" {
				return true
			}
		}
		return false
	}
	native := "no"
	if has("trellara") {
		native = "yes"
	}
	*summary = append(*summary, "native plugin allowed: "+native)
	sec.Lines = append(sec.Lines, fmt.Sprintf("output_plugin_libraries %s (pgoutput allowed: %s · native trellara plugin allowed: %s)",
		*value, yesNo(has("pgoutput")), native))
	want := append([]string{}, allowed...)
	for _, p := range []string{"pgoutput", "trellara"} {
		if !has(p) {
			want = append(want, p)
		}
	}
	quoted := make([]string, len(want))
	for i, p := range want {
		quoted[i] = quoteLiteral(p)
	}
	// A list setting must be given as separate literals: one quoted string
	// would become a single element and block pgoutput too.
	action := "ALTER SYSTEM SET output_plugin_libraries = " + strings.Join(quoted, ",") + ";\nSELECT pg_reload_conf();"
	if in.provider != "" {
		action = in.setAction("output_plugin_libraries", strings.Join(want, ","))
	}
	if !has("pgoutput") {
		in.r.add(Finding{Severity: Critical, Code: "pgoutput_not_allowed", Section: SectionSettings,
			Title:  "output_plugin_libraries does not list pgoutput; logical capture is refused",
			Detail: "This server refuses any output plugin missing from output_plugin_libraries, even for superusers.",
			Action: action})
		return
	}
	if native == "no" {
		in.r.add(Finding{Severity: Info, Code: "native_plugin_not_allowed", Section: SectionSettings,
			Title:  "the optional native trellara plugin would be refused (output_plugin_libraries)",
			Detail: "The default pgoutput path works as is. Only the opt-in native extension needs this change.",
			Action: action})
	}
}

// readPluginLibraries reads output_plugin_libraries. It is missing from
// pg_settings both when the build lacks it and when the role may not see it;
// current_setting(name, true) tells the two apart (NULL only if absent).
func (in *inspector) readPluginLibraries() error {
	var v *string
	ok, err := in.optional("output_plugin_libraries (whether the native plugin would be allowed; needs pg_read_all_settings, part of pg_monitor)", func() error {
		return in.q.QueryRow(in.ctx, "SELECT current_setting('output_plugin_libraries', true)").Scan(&v)
	})
	if err != nil {
		return err
	}
	in.pluginHidden = !ok
	in.pluginValue = v
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.Trim(strings.TrimSpace(p), `"'`)
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
