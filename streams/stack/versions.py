"""The one place that pins the local stack's versions (and the docker-compose images' tags).

Apicurio 3.0.x is the newest line that runs on Java 17 (3.1+ is built for Java 21); it ships as
a Quarkus legacy jar (`<artifact>-runner.jar` + `lib/`) rather than `quarkus-run.jar`.
S3Proxy 4.1.0 runs on Java 17 (class files of 17) and honours conditional PUTs (`If-None-Match: *`,
`If-Match`), which the lake maintenance lease needs (`ground.lease`; 2.6.0 ignored them); its
Docker image is tagged by the version.
"""

KAFKA_VERSION = "4.1.1"
APICURIO_VERSION = "3.0.9"
LOG4J_VERSION = "2.25.3"
S3PROXY_VERSION = "4.1.0"
JAVA_MIN_MAJOR = 17

KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
APICURIO_IMAGE = f"apicurio/apicurio-registry:{APICURIO_VERSION}"
S3PROXY_IMAGE = f"andrewgaul/s3proxy:{S3PROXY_VERSION}"
