package check

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Privileges describes what the inspecting role may do. Trellara may run as
// another role; the findings say so.
type Privileges struct {
	Role                 string   `json:"role"`
	Superuser            bool     `json:"superuser"`
	Replication          bool     `json:"replication"`
	Memberships          []string `json:"memberships"`
	CanReplicate         bool     `json:"can_replicate"`
	CanCreatePublication bool     `json:"can_create_publication"`
	Monitor              bool     `json:"monitor"`
}

// rolesOfInterest are memberships that change what the role can do or see.
var rolesOfInterest = []string{
	"pg_monitor", "pg_read_all_stats", "pg_read_all_settings", "pg_create_subscription",
	"rds_superuser", "rds_replication", "cloudsqlsuperuser", "alloydbsuperuser", "azure_pg_admin",
}

func (in *inspector) privileges() error {
	p := &in.r.Privileges
	err := in.q.QueryRow(in.ctx, `SELECT current_user::text, rolsuper, rolreplication,
		has_database_privilege(current_database(), 'CREATE')
		FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&p.Role, &p.Superuser, &p.Replication, &p.CanCreatePublication)
	if err != nil {
		return &QueryError{What: "pg_roles (current_user)", Err: err}
	}
	// pg_has_role(..., 'USAGE') follows inherited membership, which is what
	// decides the privileges the session actually has.
	rows, err := in.q.Query(in.ctx, `SELECT rolname::text FROM pg_catalog.pg_roles
		WHERE rolname = ANY($1) AND pg_has_role(current_user, oid, 'USAGE') ORDER BY rolname`, rolesOfInterest)
	if err != nil {
		return &QueryError{What: "role memberships", Err: err}
	}
	p.Memberships, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return &QueryError{What: "role memberships", Err: err}
	}
	in.roles = map[string]bool{}
	for _, m := range p.Memberships {
		in.roles[m] = true
	}
	p.Monitor = p.Superuser || in.roles["pg_monitor"]
	// On RDS the REPLICATION attribute is not grantable; rds_replication is
	// the provider's equivalent.
	p.CanReplicate = p.Superuser || p.Replication || in.roles["rds_replication"]

	sec := in.r.section(SectionPrivileges)
	var summary []string
	switch {
	case p.Superuser:
		summary = append(summary, "superuser")
	case p.Replication:
		summary = append(summary, "REPLICATION")
	case in.roles["rds_replication"]:
		summary = append(summary, "rds_replication")
	default:
		summary = append(summary, "no REPLICATION")
	}
	if !p.Superuser {
		if p.Monitor {
			summary = append(summary, "pg_monitor")
		} else {
			summary = append(summary, "no pg_monitor")
		}
	}
	sec.Summary = strings.Join(summary, " · ")
	sec.Lines = append(sec.Lines, fmt.Sprintf("role %s: superuser=%s replication=%s create on database=%s",
		p.Role, yesNo(p.Superuser), yesNo(p.Replication), yesNo(p.CanCreatePublication)))
	if len(p.Memberships) > 0 {
		sec.Lines = append(sec.Lines, "member of "+strings.Join(p.Memberships, ", "))
	}
	if p.Memberships == nil {
		p.Memberships = []string{}
	}

	role := quoteIdent(p.Role)
	if !p.CanReplicate {
		f := Finding{Severity: Warning, Code: "role_cannot_replicate", Section: SectionPrivileges,
			Title:  fmt.Sprintf("role %s cannot create or read a replication slot", p.Role),
			Detail: "Capture needs the REPLICATION attribute (or the provider's replication role). If Trellara will connect as another role, check that role instead.",
			Action: fmt.Sprintf("ALTER ROLE %s WITH REPLICATION;", role)}
		switch in.provider {
		case "aws-rds", "aws-aurora":
			f.Action = fmt.Sprintf("GRANT rds_replication TO %s;", role)
		case "gcp-cloudsql":
			f.Action = fmt.Sprintf("ALTER ROLE %s WITH REPLICATION;   -- run as a cloudsqlsuperuser member", role)
		case "azure":
			f.Action = fmt.Sprintf("ALTER ROLE %s WITH REPLICATION;   -- run as an azure_pg_admin member", role)
		}
		in.r.add(f)
	}
	if !p.CanCreatePublication && !p.Superuser {
		in.r.add(Finding{Severity: Notice, Code: "cannot_create_publication", Section: SectionPrivileges,
			Title:  fmt.Sprintf("role %s cannot create a publication in %s", p.Role, in.r.Server.Database),
			Detail: "CREATE PUBLICATION needs CREATE on the database (and ownership of each published table). Alternatively an administrator creates the publication and Trellara only reads it.",
			Action: fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s;", quoteIdent(in.r.Server.Database), role)})
	}
	if !p.Monitor {
		in.r.add(Finding{Severity: Info, Code: "no_pg_monitor", Section: SectionPrivileges,
			Title:  fmt.Sprintf("role %s is not a member of pg_monitor; parts of this report are hidden (see notes)", p.Role),
			Detail: "pg_monitor lets a role read replication and WAL statistics without any write privilege.",
			Action: fmt.Sprintf("GRANT pg_monitor TO %s;", role)})
	}
	return nil
}
