package sim

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/zeebo/xxh3"
)

// Swarm testing: beyond the catalogue's chosen fault points, a seed picks a
// random mix of faults for a simulation. A swarm scenario is named
// swarm.<simulation>.<seed>, which is all it takes to run it again.

// swarmMenu is every fault a swarm run may draw.
var swarmMenu = []Fault{
	{Point: "relay.before-flush", Action: actCrash},
	{Point: "relay.after-flush", Action: actCrash},
	{Point: "relay.after-keepalive", Action: actCrash},
	{Point: "relay.mid-stream", Action: actCrash},
	{Point: "relay.mid-big-txn", Action: actCrash},
	{Point: "relay.message", Action: actCutStream},
	{Point: "relay.publish", Action: actAmbiguous},
	{Point: "relay.publish", Action: actPartial},
	{Point: "relay.publish-chunks", Action: actPartial},
	{Point: "relay.before-flush", Action: actENOSPC},
	{Point: "target.begin", Action: actCrash},
	{Point: "target.apply", Action: actCrash},
	{Point: "target.apply-chunk", Action: actCrash},
	{Point: "target.commit", Action: actCrash},
	{Point: "target.commit", Action: actCrashAfter},
	{Point: "target.quarantine", Action: actCrash},
	{Point: "applier.before-cursor", Action: actCrash},
	{Point: "applier.start", Action: actCrash},
	{Point: "fs.sync.segment", Action: actPowerLoss},
	{Point: "fs.sync.segment", Action: actTornLoss},
	{Point: "fs.sync.segment", Action: actFsyncFail},
	{Point: "fs.sync.cursor", Action: actPowerLoss},
	{Point: "fs.sync.cursor", Action: actFsyncFail},
	{Point: "applier.step", Action: actStorm},
	{Point: "applier.step", Action: actRestartFeed},
	{Point: "applier.chunks", Action: actSwapChunks},
	{Point: "applier.chunks", Action: actFinalFirst},
}

// fanInMenu is every fault a fan-in swarm run may draw.
var fanInMenu = []Fault{
	{Point: "fanin.epoch-close", Action: actOffline, Arg: 30},
	{Point: "fanin.before-epoch-record", Action: actCrash},
	{Point: "fanin.after-table-commit", Action: actCrash},
	{Point: "fanin.step", Action: actOffline, Arg: 20},
}

// SwarmScenario returns the swarm scenario for simulation sim and seed.
func SwarmScenario(sim *Simulation, seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5a4a))
	id := fmt.Sprintf("swarm.%s.%d", sim.Name, seed)
	sc := &Scenario{ID: id, Family: "swarm", Title: "random fault mix", Simulation: sim.Name, Seed: seed,
		Invariant: "all", Reproduce: fmt.Sprintf(reproduceRun, id), Recovery: recAuto}
	if sim.FanIn != nil {
		// The fan-in model has its own fault points.
		for range 1 + rng.IntN(3) {
			f := fanInMenu[rng.IntN(len(fanInMenu))]
			f.Nth = 1 + rng.IntN(12)
			sc.Faults = append(sc.Faults, f)
		}
		sc.Recovery = recFanIn
		return sc
	}
	for range 1 + rng.IntN(4) {
		f := swarmMenu[rng.IntN(len(swarmMenu))]
		f.Nth = 1 + rng.IntN(12)
		if rng.IntN(5) == 0 {
			f.Times = 2 + rng.IntN(3)
		}
		switch f.Action {
		case actENOSPC:
			f.Arg = rng.IntN(400)
		case actStorm:
			f.Arg = 1 + rng.IntN(30)
		}
		sc.Faults = append(sc.Faults, f)
	}
	// What the simulation itself must end in.
	w := sim.Workload
	switch {
	case w.DriftAt > 0 && !w.DriftCompatible && w.Change == "":
		sc.Expect.Stop = "schema-drift"
	case sim.Retention.Expire:
		sc.Expect.Stop = "past-retention"
	}
	return sc
}

// ParseSwarmID splits swarm.<simulation>.<seed>.
func ParseSwarmID(id string) (sim string, seed uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, "swarm.")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", 0, false
	}
	seed, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], seed, true
}

// RunAll runs scenarios on all cores and returns results in input order.
// Swarm runs do not require their faults to fire: a random fault point
// may lie beyond what the run reaches.
func RunAll(scs []*Scenario, sims map[string]*Simulation, opts Options, progress func(*Result)) []*Result {
	out := make([]*Result, len(scs))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 2 * max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				sc := scs[i]
				r := Run(sc, sims[sc.Simulation], opts)
				if sc.Family == "swarm" && !r.Fired {
					r.Fired = true
					r.Pass = len(r.Violations) == 0
				}
				out[i] = r
				if progress != nil {
					mu.Lock()
					progress(r)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range scs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out
}

// SwarmSeeds returns n swarm scenarios for every simulation, seeds drawn
// from base.
func SwarmSeeds(sims map[string]*Simulation, n int, base uint64) []*Scenario {
	var out []*Scenario
	for _, name := range SimulationNames() {
		rng := rand.New(rand.NewPCG(base, xxh3.HashString(name)))
		for range n {
			out = append(out, SwarmScenario(sims[name], rng.Uint64()%1_000_000_000))
		}
	}
	return out
}

// Lookup finds a catalogue scenario, or builds a swarm scenario from its
// id, with its simulation.
func Lookup(id string) (*Scenario, *Simulation, error) {
	scs, sims := Catalogue()
	if name, seed, ok := ParseSwarmID(id); ok {
		sim, found := sims[name]
		if !found {
			return nil, nil, fmt.Errorf("chaos: no simulation %q (see docs/CORRECTNESS.md)", name)
		}
		return SwarmScenario(sim, seed), sim, nil
	}
	for _, sc := range scs {
		if sc.ID == id {
			return sc, sims[sc.Simulation], nil
		}
	}
	return nil, nil, fmt.Errorf("chaos: no scenario %q; `trellara chaos run --format json` lists them", id)
}
