# sealstream as a container image, built from our own binaries (no base image can be pulled
# here, and none is needed): FROM scratch, with exactly the shared libraries the binaries
# link. `scripts/docker-image` stages the build context (binaries, their libraries, a
# non-root user) and runs `docker build` on it; see README.md, "Docker".
FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 data/ /data/
USER 10001:10001
# The store (and, unless a key is given, the generated key file beside it) lives here. Give
# the key from a secret (`SEALSTREAM_STORE_KEY_FILE=/run/secrets/...`) or the environment
# (`SEALSTREAM_STORE_KEY`) to keep it off the data volume.
VOLUME ["/data"]
EXPOSE 4222 6222 8222
HEALTHCHECK --interval=5s --timeout=4s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/sealctl", "server", "check", "healthz", "--monitor", "127.0.0.1:8222", "--timeout", "3"]
ENTRYPOINT ["/usr/local/bin/sealstream-server"]
CMD ["-js", "-sd", "/data", "-m", "8222"]
