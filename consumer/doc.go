// Package consumer reads a flow's verified change stream from outside the
// relay, in another process, for sinks Trellara does not ship: a search
// index, a cache, a file.
//
// A Consumer opens the flow's local log read-only (segmentlog.OpenReadOnly:
// no lock, nothing repaired, reading only up to the durable end the relay
// publishes after each fsync), reads envelopes from a named cursor, checks
// each one (envelope.Decode validates the structure and the XXH3 checksum
// over the whole message) and hands it to the caller as a Unit. The cursor
// moves only when the caller says the unit is done, so after a crash the
// consumer resumes at the first unit it had not finished: delivery is at
// least once, and a sink that applies a unit idempotently (keyed by
// Unit.Offset or the envelope's commit LSN) gets exactly-once effects.
//
// The first commit registers the cursor in the log, and from then on the
// relay's retention keeps every entry the consumer has not finished (unless
// transport.local.expire_past_retention is set; then a consumer that falls
// behind the retention bound gets a *segmentlog.PastRetentionError).
// Delete a cursor you no longer use, or it holds disk forever.
//
// # Configuration
//
// Open takes the log directory itself (a flow's transport.local.dir plus
// "/log") and Options; this package never reads a trellara.yml, so a
// program needs no Trellara configuration file to consume a flow. The
// convenience that opens from one, consumerconfig.Open("trellara.yml",
// name, opts), lives in package consumerconfig, outside the data path
// (the import rules, internal/importrules, keep internal/config out of
// consumer).
//
// # Units
//
// One entry in the log is one unit: a whole source transaction, a chunk of
// one (Boundary.Kind CHUNK, chunk_index of chunk_count; the transaction is
// complete with its last chunk), a batch of snapshot rows or the end of a
// table's snapshot. Unit.Envelope carries the rows as the source's text
// output, the relations they refer to, the commit LSN and the checksum.
//
// # Example
//
//	c, err := consumer.Open("/var/lib/trellara/sales/log", "search-index", consumer.Options{})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	return c.Run(ctx, func(ctx context.Context, u consumer.Unit) error {
//		for _, row := range u.Envelope.Rows {
//			if err := index.Apply(ctx, u.Envelope, row); err != nil {
//				return err // the cursor stays before u: it is read again next time
//			}
//		}
//		return nil // done: the cursor moves past u
//	})
//
// examples/jsonl-consumer is a complete program that keeps a JSON-lines file
// of row changes this way.
package consumer
