"""What the local broker runs with: its settings beyond the defaults, and its logging."""

from __future__ import annotations

# Exactly-once on one node: the internal topics must be creatable with one replica, and a
# consumer group must not wait for more members. Topics are created explicitly by the tests.
BROKER_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "min.insync.replicas": "1",
    "default.replication.factor": "1",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # After a SIGKILL the restarted broker must wait for its old registration to expire
    # (DUPLICATE_BROKER_REGISTRATION): 4 s instead of 9 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.retention.hours": "-1",
}

LOG4J2_PROPERTIES = """\
# Written by scripts/kafka_local.py: everything to stdout, which is logs/server.log.
status = warn
name = kafka-local
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""
