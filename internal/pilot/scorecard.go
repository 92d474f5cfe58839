package pilot

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/sim"
	"github.com/trellara/trellara/internal/verify"
)

// Verdicts of a claim.
const (
	Pass   = "pass"
	Fail   = "fail"
	NotRan = "not run"
)

// Claim is one of the product's four claims, scored from a package.
type Claim struct {
	ID       int      `json:"id"`
	Claim    string   `json:"claim"`
	Verdict  string   `json:"verdict"`
	Evidence []string `json:"evidence"`
	Detail   string   `json:"detail"`
}

// Scorecard is `trellara pilot-scorecard`.
type Scorecard struct {
	Flow    string `json:"flow"`
	Package string `json:"package"`
	// Signature says who the package can be shown to come from: UNSIGNED,
	// or signed-by-KEY-ID (verified or not).
	Signature Signature `json:"signature"`
	Claims    []Claim   `json:"claims"`
}

// Failed reports whether any claim failed.
func (s *Scorecard) Failed() bool {
	for _, c := range s.Claims {
		if c.Verdict == Fail {
			return true
		}
	}
	return false
}

// The claims as the product page states them.
const (
	claimSource   = "Your source database and its WAL stay protected."
	claimBoundary = "What Postgres committed as one fact arrives as one fact."
	claimRecovery = "You can recover from failure and prove you converged afterwards."
	claimFleet    = "Completeness across the whole fleet becomes a query, not an assumption."
)

// Score derives each claim's verdict from the package's files; source
// names the package in the output.
func Score(p *Package, source string) *Scorecard {
	sc := &Scorecard{Flow: p.Manifest.Flow, Package: source, Signature: p.Signature}
	if sc.Signature.State == "" {
		sc.Signature = unsignedSignature()
	}
	chaos, chaosErr := chaosReport(p)
	live, liveFile, liveErr := liveReport(p)
	sc.Claims = []Claim{
		scoreSource(p, chaos, chaosErr),
		withLive(scoreBoundary(p, chaos, chaosErr), live, liveFile, liveErr, boundaryLive),
		withLive(scoreRecovery(p, chaos, chaosErr), live, liveFile, liveErr, recoveryLive),
		scoreFleet(p),
	}
	return sc
}

// liveReport is the package's live evidence: the qualification report,
// else the last live chaos run.
func liveReport(p *Package) (*chaoslive.Qualification, string, error) {
	for _, f := range []string{FileQualificationJSON, FileLiveChaosJSON} {
		data, ok := p.Files[f]
		if !ok {
			continue
		}
		var q chaoslive.Qualification
		if err := json.Unmarshal(data, &q); err != nil || q.Live == nil {
			return nil, f, fmt.Errorf("%s is not a live chaos report: %v", f, err)
		}
		return &q, f, nil
	}
	return nil, "", fmt.Errorf("%s; %s", missing(p, FileQualification), missing(p, FileLiveChaosHTML))
}

// withLive adds the live evidence to a claim scored from simulation: a
// failing live run fails the claim; a passing one is cited; none is said.
func withLive(c Claim, q *chaoslive.Qualification, file string, err error, judge func(*chaoslive.Report) (bool, string)) Claim {
	if err != nil {
		if file != "" {
			c.Evidence = append(c.Evidence, file)
			c.Verdict, c.Detail = Fail, c.Detail+"; live: "+err.Error()
			return c
		}
		c.Detail += "; live evidence: " + err.Error()
		return c
	}
	c.Evidence = append(c.Evidence, file)
	ok, detail := judge(q.Live)
	c.Detail += "; live (" + file + "): " + detail
	if !ok {
		c.Verdict = Fail
	}
	return c
}

func boundaryLive(r *chaoslive.Report) (bool, string) {
	bad := 0
	for _, v := range r.Violations {
		if v.Source == "reader" {
			bad++
		}
	}
	return bad == 0, fmt.Sprintf("the target reader made %d whole-transaction observations during %d real faults, %d violations", r.Reader.Observations, len(r.Faults), bad)
}

func recoveryLive(r *chaoslive.Report) (bool, string) {
	var parts []string
	for _, k := range r.Kinds {
		if k.Injected > 0 {
			parts = append(parts, fmt.Sprintf("%s n=%d caught up p95 %.1fs", k.Kind, k.Injected, k.CaughtUp.P95))
		}
	}
	return r.Verdict == "PASS", fmt.Sprintf("%s (%s); %s", r.Verdict, r.VerdictReason, strings.Join(parts, ", "))
}

// missing says why a file is absent: the manifest's not-run reason.
func missing(p *Package, file string) string {
	for _, n := range p.Manifest.NotRun {
		if n.File == file {
			return fmt.Sprintf("%s not run: %s", n.Item, n.Reason)
		}
	}
	return file + " is not in the package"
}

func chaosReport(p *Package) (*sim.Report, error) {
	data, ok := p.Files[FileChaosJSON]
	if !ok {
		return nil, fmt.Errorf("%s", missing(p, FileChaosJSON))
	}
	var r sim.Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", FileChaosJSON, err)
	}
	return &r, nil
}

// families checks that the named failure-matrix families ran every
// scenario and passed them all; it returns "" when they did.
func families(r *sim.Report, names ...string) string {
	var bad []string
	for _, n := range names {
		found := false
		for _, f := range r.Families {
			if f.Family != n {
				continue
			}
			found = true
			if f.Scenarios == 0 || f.Failed > 0 || f.NotReached > 0 {
				bad = append(bad, fmt.Sprintf("%s: %d of %d scenarios failed, %d not reached", n, f.Failed, f.Scenarios, f.NotReached))
			}
		}
		if !found {
			bad = append(bad, n+": no scenario ran")
		}
	}
	return strings.Join(bad, "; ")
}

func scoreSource(p *Package, chaos *sim.Report, chaosErr error) Claim {
	c := Claim{ID: 1, Claim: claimSource, Evidence: []string{FileCheck, FileStatus, FileChaosJSON}}
	data, ok := p.Files[FileCheck]
	if !ok {
		c.Verdict, c.Detail = NotRan, missing(p, FileCheck)
		return c
	}
	// The fields the verdict reads (check.Report's JSON form does not
	// decode back whole).
	var r struct {
		Grade    string `json:"grade"`
		Headline string `json:"headline"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		c.Verdict, c.Detail = Fail, fmt.Sprintf("%s: %v", FileCheck, err)
		return c
	}
	if !check.Passing(r.Grade) {
		c.Verdict, c.Detail = Fail, fmt.Sprintf("trellara-check grades the source %s: %s", r.Grade, r.Headline)
		return c
	}
	detail := fmt.Sprintf("trellara-check grades the source %s", r.Grade)
	if sd, ok := p.Files[FileStatus]; ok {
		var st flow.Status
		if err := json.Unmarshal(sd, &st); err != nil {
			c.Verdict, c.Detail = Fail, fmt.Sprintf("%s: %v", FileStatus, err)
			return c
		}
		if s := st.Slot; s != nil && s.Exists {
			switch s.WALStatus {
			case "lost", "unreserved":
				c.Verdict, c.Detail = Fail, fmt.Sprintf("slot %s wal_status %s: the source is removing WAL the flow still needs", s.Name, s.WALStatus)
				return c
			}
			detail += fmt.Sprintf("; slot %s wal_status %s", s.Name, s.WALStatus)
		}
	}
	if chaosErr != nil {
		c.Verdict, c.Detail = NotRan, detail+"; publish-before-acknowledge not shown: "+chaosErr.Error()
		return c
	}
	if bad := families(chaos, sim.FamilyRelay); bad != "" {
		c.Verdict, c.Detail = Fail, bad
		return c
	}
	c.Verdict, c.Detail = Pass, detail+"; relay-crash scenarios (publish before acknowledge) all pass"
	return c
}

func scoreBoundary(p *Package, chaos *sim.Report, chaosErr error) Claim {
	c := Claim{ID: 2, Claim: claimBoundary, Evidence: []string{FileChaosJSON}}
	// The live attempt first: a half-applied transaction seen on the real
	// flow fails the claim whatever the simulation says.
	live, liveBad := "", false
	if data, ok := p.Files[FileSemantics]; ok {
		c.Evidence = append(c.Evidence, FileSemantics)
		var sem struct {
			Transactions, Observations, Violations int64
			Applied                                bool
			RanAt                                  time.Time `json:"ran_at"`
		}
		if err := json.Unmarshal(data, &sem); err != nil {
			live, liveBad = FileSemantics+": "+err.Error(), true
		} else {
			live = fmt.Sprintf("the live attempt (trellara semantics, %s): %d transactions, %d target reads, %d half-applied",
				sem.RanAt.Format("2006-01-02T15:04:05Z"), sem.Transactions, sem.Observations, sem.Violations)
			if sem.Violations > 0 || sem.Observations == 0 || !sem.Applied {
				liveBad = true
				if sem.Violations == 0 {
					live += "; it observed nothing or the target did not apply every transaction"
				}
			}
		}
	} else {
		live = "the live attempt to observe a half-applied transaction is not in the package (" + missing(p, FileSemantics) + ")"
	}
	if liveBad {
		c.Verdict, c.Detail = Fail, live
		return c
	}
	if chaosErr != nil {
		c.Verdict, c.Detail = NotRan, chaosErr.Error()+"; "+live
		return c
	}
	if bad := families(chaos, sim.FamilyApplier, sim.FamilyTransport); bad != "" {
		c.Verdict, c.Detail = Fail, bad
		return c
	}
	c.Verdict, c.Detail = Pass, "applier-crash and transport scenarios (atomic apply, chunk barriers) all pass in simulation; "+live
	return c
}

func scoreRecovery(p *Package, chaos *sim.Report, chaosErr error) Claim {
	c := Claim{ID: 3, Claim: claimRecovery, Evidence: []string{FileLastVerify, FileChaosJSON}}
	data, ok := p.Files[FileLastVerify]
	if !ok {
		c.Verdict, c.Detail = NotRan, missing(p, FileLastVerify)
		return c
	}
	r, err := lastVerify(data)
	if err != nil {
		c.Verdict, c.Detail = Fail, err.Error()
		return c
	}
	switch {
	case r.Verdict != verify.Converged:
		c.Verdict, c.Detail = Fail, fmt.Sprintf("the last verify is %s", r.Verdict)
		if r.Recovery != "" {
			c.Detail += "; recovery: " + r.Recovery
		}
		return c
	case r.Watermark == nil:
		c.Verdict, c.Detail = Fail, "the last verify is CONVERGED but records no watermark"
		return c
	case !r.Watermark.CaughtUp():
		c.Verdict, c.Detail = Fail, fmt.Sprintf("the last verify's target checkpoint %s is before its watermark %s", r.Watermark.TargetCheckpoint, r.Watermark.SourceLSN)
		return c
	}
	detail := fmt.Sprintf("the last verify (%s) is CONVERGED at watermark %s over %d tables", r.StartedAt.UTC().Format("2006-01-02T15:04:05Z"), r.Watermark.SourceLSN, len(r.Tables))
	if chaosErr != nil {
		c.Verdict, c.Detail = NotRan, detail+"; the failure matrix: "+chaosErr.Error()
		return c
	}
	if s := chaos.Summary; s.Scenarios == 0 || s.Failed > 0 || s.NotReached > 0 {
		c.Verdict, c.Detail = Fail, fmt.Sprintf("failure matrix: %d of %d scenarios failed, %d not reached", s.Failed, s.Scenarios, s.NotReached)
		return c
	}
	c.Verdict, c.Detail = Pass, fmt.Sprintf("%s; all %d failure-matrix scenarios pass", detail, chaos.Summary.Scenarios)
	return c
}

func scoreFleet(p *Package) Claim {
	c := Claim{ID: 4, Claim: claimFleet, Evidence: []string{FileFleet}}
	data, ok := p.Files[FileFleet]
	if !ok {
		c.Verdict, c.Detail = NotRan, missing(p, FileFleet)
		return c
	}
	// pilot-package covers one flow and writes no fleet evidence; a
	// package holding some was not built by this version.
	c.Verdict, c.Detail = Fail, fmt.Sprintf("%s (%d bytes) is not a format this version reads", FileFleet, len(data))
	return c
}

// RenderText writes the scorecard for a terminal.
func (s *Scorecard) RenderText(w io.Writer) error {
	fmt.Fprintf(w, "pilot scorecard · flow %s · %s\n", s.Flow, s.Package)
	fmt.Fprintf(w, "signature: %s\n\n", s.Signature.Statement)
	for _, c := range s.Claims {
		fmt.Fprintf(w, "claim %d  %-8s %s\n", c.ID, strings.ToUpper(c.Verdict), c.Claim)
		fmt.Fprintf(w, "         evidence: %s\n", strings.Join(c.Evidence, ", "))
		if _, err := fmt.Fprintf(w, "         %s\n\n", c.Detail); err != nil {
			return err
		}
	}
	return nil
}
