# start_dev_kafka: a three-broker in-process Kafka cluster
# (trellara-full dev kafka-cluster, franz-go kfake, memory only) in the
# background, for the Kafka demos (sourced, with T, work and demo set).
# Sets kc (its pid, for the demo's cleanup) and brokers.
start_dev_kafka() {
	step "trellara-full dev kafka-cluster --brokers 3   (in-process kfake, in the background)"
	"$T" dev kafka-cluster --brokers 3 >"$work/kafka.log" 2>&1 &
	kc=$!
	for _ in $(seq 1 100); do
		grep -q '^ready:' "$work/kafka.log" && break
		kill -0 "$kc" 2>/dev/null || { echo "$demo: the dev cluster exited:"; cat "$work/kafka.log"; exit 1; }
		sleep 0.1
	done
	grep -q '^ready:' "$work/kafka.log" || { echo "$demo: the dev cluster did not become ready:"; cat "$work/kafka.log"; exit 1; }
	cat "$work/kafka.log"
	brokers=$(sed -n 's/^brokers //p' "$work/kafka.log")
}
