// A peer for bench_vs_loop: the npm `sqs-consumer` library (bbc/sqs-consumer, on the AWS SDK for
// JavaScript v3), configured the way its README suggests for throughput: POLLERS consumers in one
// process, batches of 10, each batch's messages POSTed to the sink concurrently, then acknowledged
// together (one DeleteMessageBatch). Installed by scripts/bench-peers.sh; started by the bench with
// QUEUE_URL, SQS_ENDPOINT, SINK_URL, POLLERS and WAIT_SECONDS in its environment.
import { Consumer } from "sqs-consumer";
import { SQSClient } from "@aws-sdk/client-sqs";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const queueUrl = env("QUEUE_URL");
const sink = env("SINK_URL");
const sqs = new SQSClient({ endpoint: env("SQS_ENDPOINT"), region: process.env.AWS_REGION ?? "us-east-1" });

async function post(message) {
  const response = await fetch(sink, {
    method: "POST",
    headers: {
      "ce-specversion": "1.0",
      "ce-id": message.MessageId,
      "ce-source": queueUrl,
      "ce-type": "dev.sluice.sqs.message",
      "content-type": "application/json",
    },
    body: message.Body,
  });
  await response.arrayBuffer();
  return response.ok;
}

for (let i = 0; i < Number(env("POLLERS")); i++) {
  const consumer = Consumer.create({
    queueUrl,
    sqs,
    batchSize: 10,
    waitTimeSeconds: Number(env("WAIT_SECONDS")),
    handleMessageBatch: async (messages) => {
      const ok = await Promise.all(messages.map(post));
      return messages.filter((_, k) => ok[k]);
    },
  });
  consumer.on("error", (err) => console.error(`sqs-consumer error: ${err.message}`));
  consumer.on("processing_error", (err) => console.error(`processing error: ${err.message}`));
  consumer.start();
}
process.on("SIGTERM", () => process.exit(0));
