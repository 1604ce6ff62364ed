// Package processor holds the Processor API: Record, Processor and the
// Context through which a processor forwards records, schedules punctuators
// and reaches its state stores.
//
// A processor that counts records per key and forwards the running count:
//
//	type counter struct {
//		ctx   processor.Context[string, int64]
//		store stores.KeyValueStore[string, int64]
//	}
//
//	func (c *counter) Init(ctx processor.Context[string, int64]) (err error) {
//		c.ctx = ctx
//		c.store, err = processor.GetKeyValueStore[string, int64](ctx, "counts")
//		return err
//	}
//
//	func (c *counter) Process(r processor.Record[string, string]) error {
//		n, _, err := c.store.Get(r.Key)
//		if err != nil {
//			return err
//		}
//		n++
//		if err := c.store.Put(r.Key, n); err != nil {
//			return err
//		}
//		c.ctx.Forward(processor.WithValue(r, n))
//		return nil
//	}
//
//	func (c *counter) Close() error { return nil }
//
// Plug it into a DSL topology with topology.Process, or build a topology by
// hand with topology.AddProcessor.
package processor
