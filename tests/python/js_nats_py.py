"""JetStream through nats-py against a server URL given as argv[1].

Streams, publish acks, pull and durable push consumers, consumer info and Key-Value buckets.
Run by tests/js_nats_py.rs with the project's virtualenv; exits non-zero on any failure.
"""
import asyncio
import sys
import traceback

import nats
from nats.js import api
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def streams_and_consumers(nc):
    js = nc.jetstream()

    si = await js.add_stream(name="PY", subjects=["py.>"])
    check(si.config.name == "PY", f"stream name: {si.config}")
    check(si.state.messages == 0, f"new stream is empty: {si.state}")
    # add_stream is idempotent with the same config
    await js.add_stream(name="PY", subjects=["py.>"])

    for i in range(1, 6):
        ack = await js.publish(f"py.{i % 2}", f"m{i}".encode())
        check(ack.stream == "PY" and ack.seq == i, f"pub-ack {i}: {ack}")
    ack = await js.publish("py.x", b"d1", headers={"Nats-Msg-Id": "id-1"})
    check(ack.seq == 6 and not ack.duplicate, f"first with id: {ack}")
    ack = await js.publish("py.x", b"d1", headers={"Nats-Msg-Id": "id-1"})
    check(ack.seq == 6 and ack.duplicate, f"duplicate: {ack}")
    si = await js.stream_info("PY")
    check(si.state.messages == 6 and si.state.last_seq == 6, f"stream state: {si.state}")

    # pull consumer: fetch + ack
    psub = await js.pull_subscribe("py.>", durable="pyd", stream="PY")
    msgs = await psub.fetch(4, timeout=2)
    check([m.data for m in msgs] == [b"m1", b"m2", b"m3", b"m4"], f"fetch: {[m.data for m in msgs]}")
    check(msgs[0].metadata.sequence.stream == 1, f"metadata: {msgs[0].metadata}")
    check(msgs[0].metadata.num_pending == 5, f"pending in ack subject: {msgs[0].metadata}")
    for m in msgs[:3]:
        await m.ack()
    await msgs[3].ack_sync()
    ci = await js.consumer_info("PY", "pyd")
    check(ci.ack_floor.stream_seq == 4, f"ack floor: {ci.ack_floor}")
    check(ci.num_ack_pending == 0, f"ack pending: {ci.num_ack_pending}")
    check(ci.num_pending == 2, f"num_pending: {ci.num_pending}")
    check(ci.config.ack_policy == api.AckPolicy.EXPLICIT, f"config: {ci.config}")
    msgs = await psub.fetch(10, timeout=1)
    check([m.metadata.sequence.stream for m in msgs] == [5, 6], f"rest: {msgs}")
    for m in msgs:
        await m.ack_sync()
    try:
        await psub.fetch(1, timeout=0.5)
        raise AssertionError("fetch on an empty consumer should time out")
    except nats.errors.TimeoutError:
        pass

    # a nak comes back
    await js.publish("py.nak", b"again")
    msgs = await psub.fetch(1, timeout=2)
    await msgs[0].nak()
    msgs = await psub.fetch(1, timeout=2)
    check(msgs[0].data == b"again" and msgs[0].metadata.num_delivered == 2, f"redelivery: {msgs[0].metadata}")
    await msgs[0].ack_sync()

    # durable push consumer
    sub = await js.subscribe("py.1", durable="pushd", stream="PY")
    got = []
    for _ in range(3):
        m = await sub.next_msg(timeout=3)
        got.append(m.data)
        await m.ack()
    check(got == [b"m1", b"m3", b"m5"], f"push: {got}")
    await nc.flush()
    await asyncio.sleep(0.1)
    ci = await js.consumer_info("PY", "pushd")
    check(ci.num_pending == 0, f"push pending: {ci.num_pending}")
    check(ci.delivered.stream_seq == 5, f"push delivered: {ci.delivered}")
    check(ci.config.deliver_subject, f"push deliver subject: {ci.config}")
    await js.publish("py.1", b"m7")
    m = await sub.next_msg(timeout=3)
    check(m.data == b"m7", f"push live: {m.data}")
    await m.ack()
    await sub.unsubscribe()

    names = sorted(c.name for c in await js.consumers_info("PY"))
    check(names == ["pushd", "pyd"], f"consumers: {names}")
    await js.delete_consumer("PY", "pushd")
    names = sorted(c.name for c in await js.consumers_info("PY"))
    check(names == ["pyd"], f"after delete: {names}")


async def key_value(nc):
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="cfg", history=5)

    r1 = await kv.put("app.color", b"red")
    e = await kv.get("app.color")
    check(e.value == b"red" and e.revision == r1, f"get: {e}")
    r2 = await kv.update("app.color", b"blue", last=r1)
    check(r2 > r1, f"update revision: {r1} -> {r2}")
    try:
        await kv.update("app.color", b"green", last=r1)
        raise AssertionError("update with a stale revision must fail")
    except KeyWrongLastSequenceError:
        pass
    check((await kv.get("app.color")).value == b"blue", "stale update changed nothing")

    await kv.put("app.size", b"xl")
    await kv.put("other", b"1")
    keys = sorted(await kv.keys())
    check(keys == ["app.color", "app.size", "other"], f"keys: {keys}")

    hist = await kv.history("app.color")
    check([h.value for h in hist] == [b"red", b"blue"], f"history: {hist}")

    await kv.delete("other")
    try:
        await kv.get("other")
        raise AssertionError("get after delete must fail")
    except (KeyDeletedError, KeyNotFoundError):
        pass
    keys = sorted(await kv.keys())
    check(keys == ["app.color", "app.size"], f"keys after delete: {keys}")
    try:
        await kv.get("never")
        raise AssertionError("get of a missing key must fail")
    except KeyNotFoundError:
        pass

    # watch: initial values, the end-of-initial marker (None), then live updates
    w = await kv.watch("app.>")
    initial = []
    while True:
        e = await w.updates(timeout=3)
        if e is None:
            break
        initial.append((e.key, e.value))
    check(sorted(initial) == [("app.color", b"blue"), ("app.size", b"xl")], f"watch: {initial}")
    await kv.put("app.size", b"s")
    e = await w.updates(timeout=3)
    check(e is not None and (e.key, e.value) == ("app.size", b"s"), f"watch live: {e}")
    await w.stop()

    status = await kv.status()
    check(status.bucket == "cfg" and status.history == 5, f"status: {status}")


async def main(url: str) -> None:
    nc = await nats.connect(url, name="nats-py-js-test")
    try:
        await streams_and_consumers(nc)
        await key_value(nc)
    finally:
        await nc.close()
    print("nats-py jetstream: ok")


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except Exception:  # noqa: BLE001 - any failure is reported and fails the run
        traceback.print_exc()
        print("nats-py jetstream: FAILED", file=sys.stderr)
        sys.exit(1)
