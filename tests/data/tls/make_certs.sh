#!/usr/bin/env bash
# Writes the TLS test fixtures of this folder (test-only keys: never use them for anything else):
# a CA, a server certificate for 127.0.0.1 / localhost and a client certificate, both signed by
# the CA, valid for 100 years. Run from this folder; the tests read only the committed files.
set -euo pipefail
days=36500
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days $days \
  -subj "/CN=ridgeserve test CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
  -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
  -days $days -extfile server.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr \
  -subj "/CN=ridgeserve test client" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem \
  -days $days -extfile client.ext 2>/dev/null
rm -f server.csr client.csr server.ext client.ext ca.srl ca.key
