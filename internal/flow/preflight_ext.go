package flow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/sidecar"
)

// preflightExtension is preflight's source side for source.capture:
// extension, in place of the pgoutput slot and publication checks: the
// preload, the worker's settings (trellara.database, trellara.tables,
// output_plugin_libraries), the decoder's slot, the socket and its owner,
// and that this process runs as the server's OS user (the socket admits
// only that user). Every settings fix is the exact ALTER SYSTEM with the
// restart it needs.
func (f *Flow) preflightExtension(ctx context.Context, src *pgx.Conn, add func(Check)) {
	var preload, database string
	var dataDir *string
	if err := src.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries'), current_database(),
		(SELECT setting FROM pg_settings WHERE name = 'data_directory')`).Scan(&preload, &database, &dataDir); err != nil {
		add(Check{Name: "trellara extension", Detail: fmt.Sprintf("read the server's settings: %v", err)})
		return
	}
	restart := "then restart the server: systemctl restart postgresql (or pg_ctl restart -D <data_directory>)"
	if dataDir != nil {
		restart = "then restart the server: systemctl restart postgresql (or pg_ctl restart -D " + *dataDir + ")"
	}
	libs := splitSettingList(preload)
	c := Check{Name: "shared_preload_libraries", OK: hasLibrary(libs, "trellara"), Detail: preload}
	if !c.OK {
		c.Detail = fmt.Sprintf("%q does not contain trellara: the extension's decoder, socket and settings exist only when the server preloads it", preload)
		c.Fix = "ALTER SYSTEM SET shared_preload_libraries = " + quoteList(append(libs, "trellara")) + "; " + restart
		add(c)
		return // the trellara.* settings below do not exist before the preload
	}
	add(c)

	var pluginLibs string
	if err := src.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&pluginLibs); err == nil {
		list := splitSettingList(pluginLibs)
		c := Check{Name: "output_plugin_libraries (trellara)", OK: hasLibrary(list, "trellara"), Detail: pluginLibs}
		if !c.OK {
			c.Fix = "ALTER SYSTEM SET output_plugin_libraries = " + quoteList(append(list, "trellara")) + "; SELECT pg_reload_conf();"
		}
		add(c)
	}

	info, serr := sidecar.CheckServer(ctx, src)
	var slotErr *sidecar.SlotError
	if serr != nil && !errors.As(serr, &slotErr) && info.SlotName == "" {
		add(Check{Name: "trellara extension", Detail: serr.Error()})
		return
	}
	c = Check{Name: "trellara.database", OK: info.Database == database, Detail: fmt.Sprintf("%q (the flow's database is %s)", info.Database, database)}
	if !c.OK {
		c.Fix = fmt.Sprintf("ALTER SYSTEM SET trellara.database = %s; %s", quoteLiteral(database), restart)
	}
	add(c)

	var tablesSetting string
	_ = src.QueryRow(ctx, `SELECT coalesce(current_setting('trellara.tables', true), '')`).Scan(&tablesSetting)
	c = Check{Name: "trellara.tables", OK: true, Detail: fmt.Sprintf("%q covers the flow's tables", tablesSetting)}
	if strings.TrimSpace(tablesSetting) == "" {
		c.Detail = "empty: the decoder sends every table (the flow's among them)"
	} else {
		have := map[config.TableName]bool{}
		for _, piece := range splitTableList(tablesSetting) {
			if t, err := config.ParseTableName(piece); err == nil {
				have[t] = true
			}
		}
		var missing []string
		for _, t := range f.Tables() {
			if !have[t] {
				missing = append(missing, t.String())
			}
		}
		if len(missing) > 0 {
			c.OK = false
			c.Detail = fmt.Sprintf("%q lacks %s: the decoder would never send their changes", tablesSetting, strings.Join(missing, ", "))
			all := tablesSetting
			for _, m := range missing {
				all += ", " + m
			}
			c.Fix = fmt.Sprintf("ALTER SYSTEM SET trellara.tables = %s; %s", quoteLiteral(all), restart)
		}
	}
	add(c)

	switch {
	case slotErr != nil:
		add(Check{Name: "decoder slot", Detail: slotErr.Error(), Fix: slotErr.Fix})
	case serr != nil:
		add(Check{Name: "decoder slot", Detail: serr.Error()})
	case !info.SlotExists:
		add(Check{Name: "decoder slot", OK: info.DecoderPID == 0,
			Detail: fmt.Sprintf("%s does not exist yet: the decoder creates it when it starts", info.SlotName)})
	default:
		add(Check{Name: "decoder slot", OK: true, Detail: fmt.Sprintf("%s (plugin trellara, database %s), decoder pid %d", info.SlotName, info.Database, info.DecoderPID)})
	}

	sock := f.Cfg.Source.Socket
	c = Check{Name: "socket", OK: true, Detail: sock}
	var owner *syscall.Stat_t
	switch st, err := os.Stat(sock); {
	case sock != info.SocketPath:
		c.OK = false
		c.Detail = fmt.Sprintf("source.socket is %s but the server's trellara.socket_path is %s", sock, info.SocketPath)
		c.Fix = "set source.socket: " + info.SocketPath
	case err != nil:
		c.OK = false
		c.Detail = fmt.Sprintf("%s: %v (the decoder worker opens it when it runs; pid %d)", sock, err, info.DecoderPID)
		c.Fix = "check the server log for the trellara decoder's error, and that trellara.database is set; " + restart
	case st.Mode()&os.ModeSocket == 0:
		c.OK = false
		c.Detail = sock + " is not a socket"
	default:
		owner, _ = st.Sys().(*syscall.Stat_t)
	}
	var serverUID int = -1
	if dataDir != nil {
		if st, err := os.Stat(*dataDir); err == nil {
			serverUID = int(st.Sys().(*syscall.Stat_t).Uid)
		}
	}
	if c.OK && owner != nil && serverUID >= 0 && int(owner.Uid) != serverUID {
		c.OK = false
		c.Detail = fmt.Sprintf("%s is owned by %s, not by the server's OS user %s (the owner of %s)", sock, userName(int(owner.Uid)), userName(serverUID), *dataDir)
		c.Fix = "another process holds the path: stop it and remove " + sock + "; " + restart
	}
	if c.OK && owner != nil {
		c.Detail = fmt.Sprintf("%s, owned by %s", sock, userName(int(owner.Uid)))
	}
	add(c)

	c = Check{Name: "OS user", OK: true}
	switch {
	case serverUID < 0:
		c.Detail = "the server's OS user is unknown here (data_directory unreadable: the role needs pg_read_all_settings or superuser, or the server is on another machine)"
		c.OK = owner != nil && int(owner.Uid) == os.Geteuid()
		if owner == nil {
			c.OK = false
		}
		if !c.OK {
			c.Fix = "run trellara on the server's machine as the server's OS user (e.g. runuser -u postgres -- trellara ...)"
		}
	case os.Geteuid() != serverUID:
		c.OK = false
		c.Detail = fmt.Sprintf("trellara runs as %s, the server as %s: the extension's socket admits only the server's user", userName(os.Geteuid()), userName(serverUID))
		c.Fix = fmt.Sprintf("run trellara as %s (runuser -u %s -- trellara ..., or the unit trellara-sidecar@.service)", userName(serverUID), userName(serverUID))
	default:
		c.Detail = "trellara runs as the server's OS user " + userName(serverUID)
	}
	add(c)
}

// splitSettingList splits a list setting (a, "b", c) into its elements.
func splitSettingList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.Trim(strings.TrimSpace(e), `"`); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func hasLibrary(list []string, name string) bool {
	for _, e := range list {
		if e == name || strings.HasSuffix(e, "/"+name) {
			return true
		}
	}
	return false
}

// quoteList renders list elements as ALTER SYSTEM's list form: 'a', 'b'.
func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, e := range list {
		q[i] = quoteLiteral(e)
	}
	return strings.Join(q, ", ")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// splitTableList splits trellara.tables at commas outside double quotes.
func splitTableList(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ',' && !quoted:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	if t := strings.TrimSpace(cur.String()); t != "" {
		out = append(out, t)
	}
	return out
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
