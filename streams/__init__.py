"""The Kafka side of the platform: topics declared as code (`streams.topics`), the embedded
local stack (`streams.stack`), the Avro codec in the Confluent wire format (`streams.serde`),
the client SDK with its disk spool and privacy (`streams.client`), synchronous writes and bounded
reads of control topics (`streams.topic_io`) and the HTTP ingestion gateway (`streams.gateway`)."""
