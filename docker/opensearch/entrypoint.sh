#!/bin/bash
# Writes the internal user database with the admin password from the environment (bcrypt hash;
# the password itself is never written), then starts OpenSearch with the image's entrypoint.
# The security index is created from it on the first start only: to change the password later,
# use the security REST API (PUT _plugins/_security/api/account) or securityadmin.sh.
set -euo pipefail
: "${OPENSEARCH_ADMIN_PASSWORD:?set OPENSEARCH_PASSWORD in docker/.env}"
config=/usr/share/opensearch/config/opensearch-security
hash=$(OPENSEARCH_JAVA_HOME=/usr/share/opensearch/jdk \
  /usr/share/opensearch/plugins/opensearch-security/tools/hash.sh -env OPENSEARCH_ADMIN_PASSWORD | tail -n 1)
cat > "$config/internal_users.yml" <<YAML
_meta:
  type: "internalusers"
  config_version: 2
admin:
  hash: "$hash"
  reserved: true
  backend_roles: ["admin"]
  description: "Administrator; its password comes from OPENSEARCH_PASSWORD"
YAML
unset OPENSEARCH_ADMIN_PASSWORD
exec /usr/share/opensearch/opensearch-docker-entrypoint.sh opensearch
