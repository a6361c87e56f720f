"""Peers for the S3 payload tests and benchmark: real AWS clients nobody here wrote.

Run with the venv tests/scripts/pyclients.sh prints; AWS_ENDPOINT_URL (LocalStack), credentials
and AWS_REGION come from the environment. One JSON line of results on stdout.

  upload BUCKET KEY FILE [KEY FILE ...]     boto3 upload_file (multipart above 8 MiB, as boto3 does)
  delete BUCKET KEY                         boto3 delete_object
  xsend QUEUE BUCKET FILE [FILE ...]        Extended Client send_message, each file's text as a body
  xreceive QUEUE COUNT OUTDIR               Extended Client receive_message until COUNT bodies,
                                            each written to OUTDIR/<n>; deletes what it received
  baseline BUCKET PREFIX COUNT URL          GetObject + POST per object, the plain boto3 loop
"""

import json
import os
import sys
import time
import urllib.request

import boto3


def client(service):
    return boto3.client(service)


def upload(bucket, pairs):
    s3 = client("s3")
    for key, path in zip(pairs[::2], pairs[1::2]):
        s3.upload_file(path, bucket, key)
    return {"uploaded": len(pairs) // 2}


def xsend(queue, bucket, paths):
    import sqs_extended_client  # noqa: F401  (patches boto3's SQS client)

    sqs = client("sqs")
    sqs.large_payload_support = bucket
    for path in paths:
        with open(path, encoding="utf-8") as f:
            sqs.send_message(QueueUrl=queue, MessageBody=f.read())
    return {"sent": len(paths)}


def xreceive(queue, count, outdir):
    import sqs_extended_client  # noqa: F401

    sqs = client("sqs")
    sqs.large_payload_support = "unused-for-receive"
    got, deadline = 0, time.time() + 120
    while got < count and time.time() < deadline:
        answer = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                                     MessageAttributeNames=["All"])
        for message in answer.get("Messages", []):
            with open(os.path.join(outdir, str(got)), "w", encoding="utf-8") as f:
                f.write(message["Body"])
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
            got += 1
    return {"received": got}


def baseline(bucket, prefix, count, url):
    s3 = client("s3")
    started, total = time.time(), 0
    for i in range(count):
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}{i}")["Body"].read()
        total += len(body)
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "ce-specversion": "1.0", "ce-id": f"baseline-{i}", "ce-source": "boto3", "ce-type": "t",
            "content-type": "application/octet-stream"})
        urllib.request.urlopen(request).read()
    return {"objects": count, "bytes": total, "seconds": time.time() - started}


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "upload":
        result = upload(args[0], args[1:])
    elif command == "delete":
        client("s3").delete_object(Bucket=args[0], Key=args[1])
        result = {"deleted": 1}
    elif command == "xsend":
        result = xsend(args[0], args[1], args[2:])
    elif command == "xreceive":
        result = xreceive(args[0], int(args[1]), args[2])
    elif command == "baseline":
        result = baseline(args[0], args[1], int(args[2]), args[3])
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
