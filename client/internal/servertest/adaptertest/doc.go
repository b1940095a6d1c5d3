// Package adaptertest is what the broker adapters' tests share: a grid to
// run against, a record of what handlers did, the adapters' counters,
// running Consume until the test ends, and the conformance suite every
// adapter runs.
//
// The suite (Run) is one set of scenarios, written once, in the way
// testing/fstest.TestFS is one test of every fs.FS: every outcome of
// client.Process settled as the adapters document it, a consumer that dies
// mid-handler taken over by the next one, a consumer that stops handing
// its messages back, and a handler that outlives the broker's redelivery
// period keeping its message. An adapter's test gives it a Harness: how to
// open a broker of the scenario's own (Broker: publish, start a consumer,
// see what is pending and what was set aside) and, as data, where the
// adapter legitimately differs (Kafka derives a key for a record without
// one, rewinds a partition to a retried record, runs one key's records of
// a poll one after the other; RabbitMQ hands a dead consumer's message to
// the next at once; ...). The suite never asks which adapter it runs.
//
// Brokers and grids are real: a grid node (internal/gridtest) and the
// adapter's broker, or the in-process fake its package keeps where none
// runs here. The suite waits on conditions with deadlines, never sleeps.
package adaptertest
