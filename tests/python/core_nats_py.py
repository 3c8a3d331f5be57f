"""Core NATS through nats-py against a server URL given as argv[1].

Run by tests/nats_py.rs with the project's virtualenv; exits non-zero on any failure.
"""
import asyncio
import sys

import nats
from nats.errors import NoRespondersError


async def main(url: str) -> None:
    nc = await nats.connect(url, name="nats-py-test")
    other = await nats.connect(url)

    # pub/sub with wildcard, order kept
    got = []
    done = asyncio.Event()

    async def on_msg(msg):
        got.append((msg.subject, msg.data))
        if len(got) == 100:
            done.set()

    await nc.subscribe("py.*", cb=on_msg)
    await nc.flush()
    for i in range(100):
        await other.publish(f"py.{i % 3}", str(i).encode())
    await other.flush()
    try:
        await asyncio.wait_for(done.wait(), 15)
    except asyncio.TimeoutError:
        raise AssertionError(f"received {len(got)} of 100 messages") from None
    assert [d for _, d in got] == [str(i).encode() for i in range(100)], got[:5]

    # request/reply
    async def responder(msg):
        await msg.respond(b"pong:" + msg.data)

    await other.subscribe("py.svc", cb=responder)
    await other.flush()
    resp = await nc.request("py.svc", b"ping", timeout=2)
    assert resp.data == b"pong:ping", resp.data

    # no responders
    try:
        await nc.request("nobody.listens.here", b"x", timeout=2)
        raise AssertionError("expected NoRespondersError")
    except NoRespondersError:
        pass

    # headers, repeated values kept
    hdr_msgs = []
    hdr_done = asyncio.Event()

    async def on_hdr(msg):
        hdr_msgs.append(msg)
        hdr_done.set()

    await nc.subscribe("py.hdr", cb=on_hdr)
    await nc.flush()
    await other.publish("py.hdr", b"body", headers={"X-Id": "42", "Mixed-Case": "v"})
    await other.flush()
    await asyncio.wait_for(hdr_done.wait(), 5)
    m = hdr_msgs[0]
    assert m.headers["X-Id"] == "42" and m.headers["Mixed-Case"] == "v", m.headers
    assert m.data == b"body"

    # queue group: each message to one member
    counts = [0, 0, 0]
    total = asyncio.Event()

    def member(i):
        async def cb(_msg):
            counts[i] += 1
            if sum(counts) == 90:
                total.set()
        return cb

    for i in range(3):
        await nc.subscribe("py.work", queue="workers", cb=member(i))
    await nc.flush()
    for i in range(90):
        await other.publish("py.work", b"job")
    await other.flush()
    await asyncio.wait_for(total.wait(), 5)
    await asyncio.sleep(0.2)
    assert sum(counts) == 90, counts

    await nc.drain()
    await other.drain()
    print("nats-py core: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
