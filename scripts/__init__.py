"""Developer and CI helper scripts (kafka_local: the local Kafka broker)."""
