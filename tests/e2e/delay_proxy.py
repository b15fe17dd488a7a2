#!/usr/bin/env python3
"""A TCP relay that delays every byte by a fixed time, for a slow link to Redis.

delay_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS:
accepts connections on LISTEN_HOST:LISTEN_PORT and relays each to
TARGET_HOST:TARGET_PORT; what either side sends reaches the other DELAY_MS
later, in order, so a round trip through it takes twice DELAY_MS more.
Prints "listening" once it accepts.  Killing it closes every connection.
"""
import asyncio
import sys


async def pipe(reader, writer, delay):
    """Copies reader to writer, each chunk delay seconds after it came."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def main():
    host, port, thost, tport = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    delay = int(sys.argv[5]) / 1000.0

    async def relay(creader, cwriter):
        try:
            treader, twriter = await asyncio.open_connection(thost, tport)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, twriter, delay), pipe(treader, cwriter, delay))

    server = await asyncio.start_server(relay, host, port, reuse_address=True)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
