#!/bin/sh
# One-shot: a private CA and one TLS certificate for the in-network services (OpenSearch HTTP +
# transport, Qdrant), written to /certs once. Replace with certificates from your own CA in production.
set -eu
cd /certs
if [ -s node.pem ] && [ -s root-ca.pem ]; then
  echo "certificates already present in /certs"; exit 0
fi
apk add --no-cache openssl >/dev/null
umask 077
openssl genrsa -out root-ca-key.pem 4096
openssl req -x509 -new -key root-ca-key.pem -sha256 -days 3650 -out root-ca.pem \
  -subj "/O=retrieval_assets/OU=retrieval/CN=retrieval-root-ca"

# Service certificate: every name the services are reached by, inside the network and from the host.
cat > node.ext <<'EXT'
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:opensearch, DNS:qdrant, DNS:localhost, IP:127.0.0.1
EXT
openssl genrsa -out node-rsa.pem 2048
# OpenSearch's security plugin reads PKCS#8 keys only.
openssl pkcs8 -topk8 -nocrypt -in node-rsa.pem -out node-key.pem
openssl req -new -key node-key.pem -out node.csr -subj "/O=retrieval_assets/OU=retrieval/CN=retrieval-node"
openssl x509 -req -in node.csr -CA root-ca.pem -CAkey root-ca-key.pem -CAcreateserial -sha256 -days 825 \
  -extfile node.ext -out node.pem

# Admin client certificate, for securityadmin.sh (changing the security configuration later).
openssl genrsa -out admin-rsa.pem 2048
openssl pkcs8 -topk8 -nocrypt -in admin-rsa.pem -out admin-key.pem
openssl req -new -key admin-key.pem -out admin.csr -subj "/O=retrieval_assets/OU=retrieval/CN=admin"
openssl x509 -req -in admin.csr -CA root-ca.pem -CAkey root-ca-key.pem -CAcreateserial -sha256 -days 825 \
  -out admin.pem

rm -f node-rsa.pem admin-rsa.pem ./*.csr node.ext root-ca.srl root-ca-key.pem
# OpenSearch runs as uid 1000; Qdrant and Dagster as root. Keys stay unreadable to others.
chown 1000:1000 ./*.pem
chmod 0644 root-ca.pem node.pem admin.pem
chmod 0640 node-key.pem admin-key.pem
echo "certificates written to /certs"
