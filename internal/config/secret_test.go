package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const secretText = "s3cr3t-Hunter2-value"

// leaks reports whether out contains the secret or a common encoding of it.
func leaks(out string) bool {
	for _, form := range []string{secretText, fmt.Sprintf("%x", secretText), fmt.Sprintf("% x", secretText), fmt.Sprintf("%X", secretText)} {
		if strings.Contains(out, form) {
			return true
		}
	}
	return false
}

func TestSecretFormatting(t *testing.T) {
	s := NewSecret(secretText)
	holder := struct {
		Name   string
		S      Secret
		P      *Secret
		hidden Secret
	}{"x", s, &s, s}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "% x", "%d", "%T", "%p", "%10.3s", "%-20v", "%#x", "%U", "%t", "%e"}
	for _, v := range verbs {
		for name, arg := range map[string]any{"value": s, "pointer": &s, "struct": holder, "struct pointer": &holder,
			"slice": []Secret{s}, "map": map[string]Secret{"k": s}, "ref": InlineRef(secretText)} {
			if out := fmt.Sprintf(v, arg); leaks(out) {
				t.Errorf("fmt %s of %s leaks: %s", v, name, out)
			}
		}
	}
	if got := fmt.Sprint(s); got != "<redacted>" {
		t.Errorf("Sprint = %q", got)
	}
	if s.Reveal() != secretText {
		t.Error("Reveal lost the value")
	}
	if s.String() != "<redacted>" || s.GoString() != "<redacted>" {
		t.Error("String/GoString")
	}
	if fmt.Sprint(errors.New(fmt.Sprint("wrap: ", s))) != "wrap: <redacted>" {
		t.Error("error wrapping")
	}
}

func TestSecretEncoding(t *testing.T) {
	s := NewSecret(secretText)
	type doc struct {
		S   Secret            `json:"s" yaml:"s"`
		P   *Secret           `json:"p" yaml:"p"`
		M   map[string]Secret `json:"m" yaml:"m"`
		Ref SecretRef         `json:"ref" yaml:"ref"`
	}
	d := doc{S: s, P: &s, M: map[string]Secret{"k": s}, Ref: InlineRef(secretText)}

	j, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if leaks(string(j)) || !strings.Contains(string(j), `"s":"\u003credacted\u003e"`) {
		t.Errorf("json: %s", j)
	}
	if tx, _ := s.MarshalText(); string(tx) != "<redacted>" {
		t.Errorf("MarshalText = %s", tx)
	}

	y, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if leaks(string(y)) || !strings.Contains(string(y), "s: <redacted>") {
		t.Errorf("yaml: %s", y)
	}
}

func TestSecretSlog(t *testing.T) {
	s := NewSecret(secretText)
	type holder struct {
		URL Secret
		Ref SecretRef
	}
	for name, newHandler := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(newHandler(&buf))
		log.Info("connect", "url", s, "ptr", &s)
		log.Info("connect", slog.Any("any", s), slog.Group("g", slog.Any("url", s)))
		log.Info("struct", "holder", holder{URL: s, Ref: InlineRef(secretText)}, "holderptr", &holder{URL: s})
		log.With("url", s).WithGroup("grp").Info("with", "url", s)
		log.Info("ref", "ref", InlineRef(secretText), "env", EnvRef("TRELLARA_SOURCE_URL"))
		out := buf.String()
		if leaks(out) {
			t.Errorf("%s handler leaks:\n%s", name, out)
		}
		if !strings.Contains(out, "<redacted>") || !strings.Contains(out, "TRELLARA_SOURCE_URL") {
			t.Errorf("%s handler output unexpected:\n%s", name, out)
		}
	}
}

func TestSecretRefFormatting(t *testing.T) {
	for _, tc := range []struct {
		ref  SecretRef
		want string
	}{
		{EnvRef("TRELLARA_SOURCE_URL"), "{env: TRELLARA_SOURCE_URL}"},
		{FileRef("/etc/trellara/url"), "{file: /etc/trellara/url}"},
		{InlineRef(secretText), "<redacted: inline>"},
		{SecretRef{}, "<unset>"},
	} {
		for _, v := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			if got := fmt.Sprintf(v, tc.ref); got != tc.want {
				t.Errorf("%s of %v = %q, want %q", v, tc.want, got, tc.want)
			}
		}
	}
	j, _ := json.Marshal(EnvRef("X"))
	if string(j) != `{"env":"X"}` {
		t.Errorf("json env ref = %s", j)
	}
}

// TestConfigPrintingRedacts: a whole Config, printed or encoded the lazy way,
// does not reveal an inline credential.
func TestConfigPrintingRedacts(t *testing.T) {
	in := edit(t, readTestdata(t, "local.yml"), "{env: TRELLARA_SOURCE_URL}", "'postgres://app:"+secretText+"@db/sales'")
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := c.ResolveSecretsWith(fakeResolver{env: map[string]string{"TRELLARA_TARGET_URL": "postgres://t:" + secretText + "@t/db"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		for name, arg := range map[string]any{"config": c, "config value": *c, "secrets": sec} {
			if out := fmt.Sprintf(v, arg); leaks(out) {
				t.Errorf("%s of %s leaks: %s", v, name, out)
			}
		}
	}
	for name, arg := range map[string]any{"config": c, "secrets": sec} {
		j, err := json.Marshal(arg)
		if err != nil || leaks(string(j)) {
			t.Errorf("json of %s leaks or fails: %s %v", name, j, err)
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", arg)
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "v", arg)
		if leaks(buf.String()) {
			t.Errorf("slog of %s leaks: %s", name, buf.String())
		}
	}
}

type fakeResolver struct {
	env   map[string]string
	files map[string]string
}

func (f fakeResolver) LookupEnv(name string) (string, bool) { v, ok := f.env[name]; return v, ok }
func (f fakeResolver) ReadFile(path string) ([]byte, error) {
	if v, ok := f.files[path]; ok {
		return []byte(v), nil
	}
	return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "url")
	if err := os.WriteFile(good, []byte(secretText+"\r\n\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat(secretText, maxSecretFileBytes/len(secretText)+1)), 0o400); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRELLARA_TEST_SET", secretText)
	t.Setenv("TRELLARA_TEST_EMPTY", "")

	ok := []struct {
		name string
		ref  SecretRef
	}{
		{"env", EnvRef("TRELLARA_TEST_SET")},
		{"file trims trailing newlines", FileRef(good)},
		{"inline", InlineRef(secretText)},
	}
	for _, tc := range ok {
		s, err := tc.ref.Resolve()
		if err != nil || s.Reveal() != secretText {
			t.Errorf("%s: got %q, %v", tc.name, s.Reveal(), err)
		}
	}

	bad := []struct {
		name string
		ref  SecretRef
		want []string
		is   error
	}{
		{"env unset", EnvRef("TRELLARA_TEST_UNSET"), []string{"TRELLARA_TEST_UNSET", "is not set", "fix: set TRELLARA_TEST_UNSET"}, nil},
		{"env empty", EnvRef("TRELLARA_TEST_EMPTY"), []string{"TRELLARA_TEST_EMPTY", "is empty"}, nil},
		{"file missing", FileRef(filepath.Join(dir, "missing")), []string{filepath.Join(dir, "missing"), "cannot read secret file", "no such file"}, fs.ErrNotExist},
		{"file is a directory", FileRef(dir), []string{dir, "cannot read secret file"}, nil},
		{"file empty", FileRef(empty), []string{empty, "is empty"}, nil},
		{"file too large", FileRef(big), []string{big, "larger than"}, nil},
		{"file relative", FileRef("secrets/url"), []string{"is not an absolute path", "fix: write the absolute path"}, nil},
		{"unset reference", SecretRef{}, []string{"names neither"}, nil},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			tc.ref.path = "source.database_url"
			_, err := tc.ref.Resolve()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range append(tc.want, "config: ", "source.database_url") {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if leaks(msg) {
				t.Errorf("error leaks the content: %q", msg)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) false", tc.is)
			}
		})
	}
}

func TestResolveSecretsReportsAll(t *testing.T) {
	in := edit(t, readTestdata(t, "kafka-production.yml"))
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ResolveSecretsWith(fakeResolver{env: map[string]string{"TRELLARA_TARGET_URL": ""}})
	errs := validationErrors(t, err)
	want := map[string]string{
		"source.database_url.file":          "/etc/trellara/source-url",
		"target.database_url.env":           "TRELLARA_TARGET_URL",
		"transport.kafka.sasl.password.env": "TRELLARA_KAFKA_PASSWORD",
	}
	if len(errs) != len(want) {
		t.Fatalf("want %d errors, got:\n%v", len(want), err)
	}
	for _, fe := range errs {
		if w, ok := want[fe.Path]; !ok || !strings.Contains(fe.Message, w) || fe.Line == 0 || fe.Fix == "" {
			t.Errorf("unexpected error %+v", fe)
		}
	}

	// Production: the URLs verify TLS (tls.go).
	const sURL, tURL = "postgres://s/db?sslmode=verify-full&sslrootcert=/etc/ca.pem", "host=t sslmode=verify-full sslrootcert=/etc/ca.pem"
	s, err := c.ResolveSecretsWith(fakeResolver{
		env:   map[string]string{"TRELLARA_TARGET_URL": tURL, "TRELLARA_KAFKA_PASSWORD": "k-pw"},
		files: map[string]string{"/etc/trellara/source-url": sURL + "\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceDatabaseURL.Reveal() != sURL || s.TargetDatabaseURL.Reveal() != tURL || s.KafkaSASLPassword.Reveal() != "k-pw" {
		t.Error("resolved values wrong")
	}
}

// A credential typed where its reference's name belongs ({env: "Hunter2!"},
// {file: "Hunter2!"}, an unquoted number) is never echoed: not by
// validation, not by resolution, not when the reference is printed, logged
// or encoded. Each message says the reference is invalid and how to fix it.
func TestPlantedSecretInReferenceNeverEchoed(t *testing.T) {
	const planted = "Hunter2!"
	local := readTestdata(t, "local.yml")
	for _, tc := range []struct {
		name, in, path, want string
	}{
		{"env", edit(t, local, "{env: TRELLARA_SOURCE_URL}", `{env: "Hunter2!"}`), "source.database_url.env", "is not an environment variable name"},
		{"file", edit(t, local, "{env: TRELLARA_TARGET_URL}", `{file: "Hunter2!"}`), "target.database_url.file", "is not an absolute path"},
		{"env and file", edit(t, local, "{env: TRELLARA_SOURCE_URL}", `{env: "Hunter2!", file: "Hunter2!"}`), "source.database_url", "names both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), planted) {
				t.Errorf("validation echoes the planted secret: %v", err)
			}
			found := false
			for _, fe := range validationErrors(t, err) {
				found = found || (fe.Path == tc.path && strings.Contains(fe.Message, tc.want) && fe.Fix != "")
			}
			if !found {
				t.Errorf("no error at %s saying %q with a fix:\n%v", tc.path, tc.want, err)
			}
		})
	}

	// Resolution refuses the same shapes without reading anything.
	for _, ref := range []SecretRef{EnvRef(planted), FileRef(planted), {Env: planted, File: planted}} {
		ref.path = "source.database_url"
		_, err := ref.ResolveWith(fakeResolver{env: map[string]string{planted: "x"}, files: map[string]string{planted: "x"}})
		if err == nil || strings.Contains(err.Error(), planted) || !strings.Contains(err.Error(), "fix: ") {
			t.Errorf("resolve %v: %v", ref, err)
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("ref", "ref", ref)
		j, _ := json.Marshal(ref)
		y, _ := yaml.Marshal(ref)
		for what, out := range map[string]string{"String": ref.String(), "%v": fmt.Sprintf("%v", ref), "%#v": fmt.Sprintf("%#v", ref),
			"slog": buf.String(), "json": string(j), "yaml": string(y)} {
			if strings.Contains(out, planted) {
				t.Errorf("%s of %#v echoes the planted secret: %s", what, ref, out)
			}
		}
	}
	// Valid names and absolute paths are still shown as written.
	if got := EnvRef("TRELLARA_SOURCE_URL").String(); got != "{env: TRELLARA_SOURCE_URL}" {
		t.Errorf("valid env reference renders as %s", got)
	}
	if got := FileRef("/etc/trellara/source-url").String(); got != "{file: /etc/trellara/source-url}" {
		t.Errorf("valid file reference renders as %s", got)
	}

	// An unquoted number under a credential key is reported by its kind only.
	_, err := Parse([]byte(edit(t, local, "{env: TRELLARA_SOURCE_URL}", "31337424242")))
	if err == nil || strings.Contains(err.Error(), "31337424242") || !strings.Contains(err.Error(), "not an unquoted int value") {
		t.Errorf("unquoted number: %v", err)
	}
}
