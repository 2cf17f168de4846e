#!/usr/bin/env bash
# Makes what docker-compose.yml in this folder mounts, into ./secrets (never commit it):
# a CA, the broker's certificate (for the names kafka and localhost) and configuration, the
# workers' HTTPS certificate, the SCRAM passwords of the admin, the workers and the
# application with their client configurations, and the bcrypt hash of Prometheus' scrape password (web.yml). Needs openssl and python3 with bcrypt
# (the banditflow virtualenv has it: PYTHON=.venv/bin/python deploy/sasl-ssl/make-secrets.sh).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
mkdir -p secrets && cd secrets
leaf() {  # name, subjectAltName
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
    -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\n' "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm "$1.csr" "$1.ext"
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
  -out ca.pem -subj /CN=banditflow-example-ca -days 825 2>/dev/null
leaf kafka DNS:kafka,DNS:localhost,IP:127.0.0.1
leaf worker-web DNS:worker,DNS:localhost
# Kafka reads a PEM key store: the certificate chain and the (PKCS#8) key in one file.
openssl pkcs8 -topk8 -nocrypt -in kafka.key -out kafka.pk8
cat kafka.pem ca.pem kafka.pk8 > kafka-keystore.pem && rm kafka.pk8
for user in admin worker app prometheus; do
  openssl rand -hex 16 > "$user.password"
done
$PYTHON - <<'PY'
import bcrypt, pathlib
password = pathlib.Path("prometheus.password").read_text().strip().encode()
hashed = bcrypt.hashpw(password, bcrypt.gensalt()).decode()
pathlib.Path("web.yml").write_text(
    "tls_server_config:\n  cert_file: worker-web.pem\n  key_file: worker-web.key\n"
    f"basic_auth_users:\n  prometheus: '{hashed}'\n")
PY
# The broker's configuration (Apache Kafka, KRaft, one node): SASL_SSL with SCRAM-SHA-512 on
# every client listener, the standard authorizer denying what no ACL allows.
cat > server.properties <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@kafka:9093
# The controller listener stays inside the container (not published): its principal is
# ANONYMOUS, hence a super user below.
listeners=CONTROLLER://:9093,SASL_SSL://:9094,SASL_SSL_HOST://:29094
advertised.listeners=SASL_SSL://kafka:9094,SASL_SSL_HOST://localhost:29094
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SASL_SSL_HOST:SASL_SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(cat admin.password)";
ssl.keystore.type=PEM
ssl.keystore.location=/etc/kafka/secrets/kafka-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
# kafka-acls.sh (Java) reads the admin's credentials in the Java form.
cat > admin-java.properties <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(cat admin.password)";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.pem
PROPS
# The clients' configurations (docker-compose.yml mounts them; the workers' is worker.properties).
for user in admin worker app; do
  cat > "$user.properties" <<PROPS
bootstrap.servers=kafka:9094
security.protocol=SASL_SSL
ssl.ca.location=/etc/banditflow/ca.pem
sasl.mechanism=SCRAM-SHA-512
sasl.username=$user
sasl.password=$(cat "$user.password")
PROPS
done
# The containers run as other users than you: they must read these (keep the folder private).
chmod 0644 ./*
chmod 0700 .
echo "secrets written to $(pwd)"
