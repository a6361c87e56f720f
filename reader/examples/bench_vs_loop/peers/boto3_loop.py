"""A peer for bench_vs_loop: the loop most Python teams write, POLLERS threads sharing one boto3
client, each receiving 10, POSTing them one after the other over a kept-alive connection, then one
DeleteMessageBatch. Installed by scripts/bench-peers.sh; started by the bench with QUEUE_URL,
SQS_ENDPOINT, SINK_URL, POLLERS and WAIT_SECONDS in its environment."""

import http.client
import os
import signal
import sys
import threading
import urllib.parse

import boto3
from botocore.config import Config

QUEUE = os.environ["QUEUE_URL"]
SINK = urllib.parse.urlsplit(os.environ["SINK_URL"])
WAIT = int(os.environ["WAIT_SECONDS"])
POLLERS = int(os.environ["POLLERS"])
sqs = boto3.client(
    "sqs",
    endpoint_url=os.environ["SQS_ENDPOINT"],
    region_name=os.environ.get("AWS_REGION", "us-east-1"),
    config=Config(max_pool_connections=POLLERS * 2, retries={"max_attempts": 3}),
)


def poll():
    sink = http.client.HTTPConnection(SINK.hostname, SINK.port, timeout=10)
    while True:
        try:
            messages = sqs.receive_message(
                QueueUrl=QUEUE, MaxNumberOfMessages=10, WaitTimeSeconds=WAIT, MessageSystemAttributeNames=["All"]
            ).get("Messages", [])
        except Exception as err:  # noqa: BLE001 - a peer keeps polling, as such loops do
            print(f"receive failed: {err}", file=sys.stderr)
            continue
        done = []
        for i, m in enumerate(messages):
            headers = {
                "ce-specversion": "1.0",
                "ce-id": m["MessageId"],
                "ce-source": QUEUE,
                "ce-type": "dev.sluice.sqs.message",
                "content-type": "application/json",
            }
            sink.request("POST", SINK.path or "/", body=m["Body"].encode(), headers=headers)
            response = sink.getresponse()
            response.read()
            if 200 <= response.status < 300:
                done.append({"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]})
        if done:
            sqs.delete_message_batch(QueueUrl=QUEUE, Entries=done)


signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
for _ in range(POLLERS):
    threading.Thread(target=poll, daemon=True).start()
threading.Event().wait()
