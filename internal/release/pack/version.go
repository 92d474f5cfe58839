package pack

import (
	"fmt"
	"regexp"
	"strings"
)

// describeRe splits `git describe --tags --always --dirty` output:
//
//	v1.2.3                         tag
//	v1.2.3-rc1                     tag with a pre-release
//	v1.2.3-4-gabcdef0              4 commits after the tag
//	v1.2.3-rc1-4-gabcdef0-dirty    ... with uncommitted changes
//	abcdef0[-dirty]                no tag reachable (--always)
//
// The -dirty suffix is removed before matching: git always appends it last,
// and a pre-release pattern would otherwise swallow it.
var describeRe = regexp.MustCompile(`^(?:v?(\d+\.\d+\.\d+)(?:-([0-9A-Za-z.]+?))?(?:-(\d+)-g([0-9a-f]{4,40}))?|([0-9a-f]{4,40}))$`)

// PackageVersion maps git describe output to a version string that is valid,
// and orders correctly, for both dpkg and rpm:
//
//	v1.2.3                      1.2.3
//	v1.2.3-rc1                  1.2.3~rc1            (~ sorts before 1.2.3)
//	v1.2.3-4-gabcdef0-dirty     1.2.3+4.gabcdef0.dirty (+ sorts after 1.2.3)
//	abcdef0-dirty               0.0.0+gabcdef0.dirty
//
// Neither format allows '-' in the upstream version (it separates the
// release), hence the rewriting.
func PackageVersion(describe string) (string, error) {
	s := strings.TrimSpace(describe)
	dirty := strings.HasSuffix(s, "-dirty")
	m := describeRe.FindStringSubmatch(strings.TrimSuffix(s, "-dirty"))
	if m == nil {
		return "", fmt.Errorf("pack: version %q is not git describe output (vX.Y.Z[-pre][-N-gHASH][-dirty] or HASH[-dirty]); fix: tag releases vX.Y.Z and build from a git checkout", describe)
	}
	tag, pre, commits, hash, bare := m[1], m[2], m[3], m[4], m[5]
	var v string
	var local []string
	if bare != "" {
		v = "0.0.0"
		local = append(local, "g"+bare)
	} else {
		v = tag
		if pre != "" {
			v += "~" + pre
		}
		if commits != "" {
			local = append(local, commits, "g"+hash)
		}
	}
	if dirty {
		local = append(local, "dirty")
	}
	if len(local) > 0 {
		v += "+" + strings.Join(local, ".")
	}
	return v, nil
}
