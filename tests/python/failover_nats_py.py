"""Cluster failover through nats-py: argv[1] is the node the client knows, argv[2] another
node a publisher uses. The client must learn the other members from INFO, and after the
test kills its node (it writes "killed" on stdin once it has), reconnect to another member
and keep receiving.

Run by tests/nats_py.rs with the project's virtualenv; exits non-zero on any failure.
"""
import asyncio
import sys

import nats


async def wait_for(pred, what, limit=15.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def main(known: str, other: str) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect():
        reconnected.set()

    nc = await nats.connect(
        known,
        reconnected_cb=on_reconnect,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        dont_randomize=True,
    )
    await wait_for(lambda: len(nc.discovered_servers) >= 2, "connect_urls of two more members")
    got = []

    async def on_msg(m):
        got.append(m.data)

    await nc.subscribe("fo.>", cb=on_msg)
    await nc.flush()
    pub = await nats.connect(other)

    async def publish_until(data: bytes):
        # Interest travels between nodes asynchronously: publish until it arrives.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while data not in got:
            if loop.time() > deadline:
                raise AssertionError(f"{data!r} never arrived; got {got[-3:]}")
            await pub.publish("fo.msg", data)
            await pub.flush()
            await asyncio.sleep(0.1)

    await publish_until(b"before")
    before = nc.connected_url.netloc
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    assert line.strip() == "killed", line
    await asyncio.wait_for(reconnected.wait(), 20)
    after = nc.connected_url.netloc
    assert after != before, f"still on {before}"
    await publish_until(b"after")
    await nc.close()
    await pub.close()
    print(f"nats-py failover: ok ({before} -> {after})")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
