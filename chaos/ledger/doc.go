// Package ledger is the end-to-end scenario of the chaos tool, the run that
// shows what the grid is for.
//
// A producer publishes payments to a broker (RabbitMQ, Kafka or NATS
// JetStream, --broker) and publishes a share of them twice; consumer
// processes (this program again, IsConsumer and ConsumerMain) apply them
// to a PostgreSQL ledger through the broker's adapter (client/rabbitmq,
// client/kafka, client/jetstream) and client/sqlfence, recording each
// payment under its key and fencing token in the transaction that moves
// the money. At the end the ledger and the dead letters are compared with
// what was produced:
//
//	go run ./chaos ledger                                     # RabbitMQ, 10,000 payments, the faults on
//	go run ./chaos ledger --broker kafka                      # a kfake cluster in this process
//	go run ./chaos ledger --broker jetstream                  # the NATS server's JetStream
//	go run ./chaos ledger --broker kafka --messages 100000    # a long run
//	go run ./chaos ledger --json                              # one JSON object
//
// # Faults
//
// Scheduled by the share of payments settled: consumers killed with kill
// -9 (a Kafka consumer's partitions move to the others once its session
// times out: a rebalance), a consumer that joins and later leaves, one
// node of a 3-node grid killed with kill -9 and restarted 3 s later. Each
// consumer exits on purpose right after committing every Nth payment it
// applies, before Complete: the failure the fence is for. Every Nth
// payment is unpayable: its handler poisons it, and it must end
// dead-lettered. One payment, a third of the way in, is poisonous: its
// handler ends its consumer process (os.Exit) every time it runs, once
// another handler runs beside it, so that healthy payments are in flight
// in the process it takes down. The consumers use the client's default
// attempts (client.DefaultMaxAttempts), after which the grid answers
// POISONED and the adapter dead-letters the payment.
//
// # Brokers
//
// RabbitMQ: a quorum queue whose delivery limit (x-delivery-limit,
// --delivery-limit) dead-letters a message returned to it too often into
// the adapter's dead-letter queue "<queue>.dlq", and the adapter's retry
// queues. Kafka: a kfake cluster (github.com/twmb/franz-go/pkg/kfake)
// that the run starts in its own process on a loopback port; the
// consumers are one consumer group, connected with franz-go over TCP, and
// dead letters go to the topic "<topic>.dlq" (kafka.WithDeadLetterTopic).
// Kafka has no delivery budget. JetStream: a stream and a durable pull
// consumer with a short ack wait (--ack-wait) and MaxDeliver
// (--delivery-limit); dead letters go to a stream of their own
// (jetstream.WithDeadLetter). A message that runs out of its deliveries is
// given up by JetStream with no copy anywhere; the run hears of it from
// the server's advisory and reports it (broker_dropped). Each run's
// queues, topics and streams are its own and are removed at the end (the
// Kafka cluster goes with the process).
//
// # The verdict
//
// The run ends once every payment is applied or set aside (dead-lettered,
// or given up by the broker), the broker holds nothing more for the
// consumers, and every fault has happened; or after --stall without
// progress, or --timeout. It passes when no payment was applied twice
// (duplicate_effects), no healthy payment is lost, and the dead letters
// hold exactly the unpayable payments and the poisonous one: a healthy
// payment dead-lettered fails the run even when it was applied before.
// The report gives the poisonous payment's fate, the consumers it crashed
// and the handlers that ran beside it each time.
//
// It needs PostgreSQL (database test, trust auth) at --postgres, and
// RabbitMQ (guest/guest) at --amqp or NATS with JetStream at --nats for
// those brokers, and builds gridnode from this module unless
// --gridnode-bin names one.
package ledger
