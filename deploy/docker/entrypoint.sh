#!/usr/bin/env bash
# The image's entry point: `ridgeserve serve` with the container's arguments, then every
# RIDGESERVE_<FLAG> environment variable as --<flag> (RIDGESERVE_MAX_WAITING=64 gives
# --max-waiting 64; the value "true" gives the bare flag) unless the arguments set that flag,
# then the image's defaults (--host 0.0.0.0 --http-port 8000 --grpc-port 9000 --model
# /opt/ridgeserve/default-model) for whatever neither set. Other commands run as given:
# `docker run IMAGE generate --model ...`.
set -euo pipefail
binary=${RIDGESERVE_ENTRYPOINT_BINARY:-/opt/ridgeserve/bin/ridgeserve}  # (tests use another)
case "${1:-}" in
  serve) shift ;;
  generate | score | info | help | --help | -h) exec "$binary" "$@" ;;
esac
declare -A given=()
args=(serve "$@")
for arg in "$@"; do
  case "$arg" in --*) name=${arg#--} && given[${name%%=*}]=1 ;; esac
done
while IFS='=' read -r variable value; do
  case "$variable" in
    RIDGESERVE_ENTRYPOINT_BINARY) ;;
    RIDGESERVE_*)
      flag=$(tr '[:upper:]_' '[:lower:]-' <<<"${variable#RIDGESERVE_}")
      [ -n "${given[$flag]:-}" ] && continue
      given[$flag]=1
      if [ "$value" = "true" ]; then args+=("--$flag"); else args+=("--$flag" "$value"); fi
      ;;
  esac
done < <(env | sort)
for default in host=0.0.0.0 http-port=8000 grpc-port=9000 model=/opt/ridgeserve/default-model; do
  flag=${default%%=*}
  [ -n "${given[$flag]:-}" ] || args+=("--$flag" "${default#*=}")
done
exec "$binary" "${args[@]}"
