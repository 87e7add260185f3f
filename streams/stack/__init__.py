"""The embedded local stack: one Apache Kafka broker (KRaft) and Apicurio Registry, from Maven."""
