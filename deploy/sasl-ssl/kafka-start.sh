#!/usr/bin/env bash
# The broker of docker-compose.yml: formats its storage on the first start with the SCRAM
# users (KRaft stores them in the metadata log), then runs Kafka with secrets/server.properties.
set -euo pipefail
S=/etc/kafka/secrets
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  scram=()
  for user in admin worker app; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(cat "$S/$user.password")]")
  done
  /opt/kafka/bin/kafka-storage.sh format --cluster-id "${CLUSTER_ID}" \
    --config "$S/server.properties" "${scram[@]}"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$S/server.properties"
