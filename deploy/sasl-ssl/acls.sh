#!/usr/bin/env bash
# The ACLs a banditflow deployment needs (README: "Connecting to your Kafka"), set by the
# admin (a super user). Principals: User:worker (the workers), User:app (the application).
# Writing learner configs is the admin's alone: no ACL grants it to anyone else.
set -euo pipefail
acl() { /opt/kafka/bin/kafka-acls.sh --bootstrap-server kafka:9094 \
          --command-config /etc/kafka/secrets/admin-java.properties --add "$@"; }
P=banditflow   # --prefix
APP_ID=banditflow  # --app-id: the workers' consumer group and state topic <app-id>.state
# Workers: read the four inputs, write decisions and dead letters, read and write their state
# log, create the topics, join their group, and describe the cluster.
acl --allow-principal User:worker --operation Read --operation Describe \
    --topic "$P.learners" --topic "$P.contexts" --topic "$P.feedback" --topic "$P.truth"
acl --allow-principal User:worker --operation Write --operation Describe \
    --topic "$P.decisions" --topic "$P.deadletter"
acl --allow-principal User:worker --operation Read --operation Write --operation Describe \
    --topic "$APP_ID.state"
acl --allow-principal User:worker --operation Read --operation Describe --group "$APP_ID"
acl --allow-principal User:worker --operation Create --operation Describe --cluster
# The application: send contexts, feedback and truth; read decisions and dead letters (no
# consumer group: it reads them by partition).
acl --allow-principal User:app --operation Write --operation Describe \
    --topic "$P.contexts" --topic "$P.feedback" --topic "$P.truth"
acl --allow-principal User:app --operation Read --operation Describe \
    --topic "$P.decisions" --topic "$P.deadletter"
/opt/kafka/bin/kafka-acls.sh --bootstrap-server kafka:9094 \
  --command-config /etc/kafka/secrets/admin-java.properties --list
