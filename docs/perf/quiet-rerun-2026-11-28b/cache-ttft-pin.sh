set -eu
weir=build/bin/weir; model=models/kjv-target.gguf; out=/work/quiet/pin; mkdir -p $out
common=(--endpoint chat --num-requests 500 --input-len 32 --output-len 16 --temperature 0 --seed 1 --quiet)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$weir serve --model $model --port $port --set cache.memory_bytes=67108864 --set log.requests=false --set cache.name=memory > $out/server.log 2>&1 &
spid=$!
for i in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
$weir bench --url http://127.0.0.1:$port "${common[@]}" --concurrency 16 > /dev/null
for p in 1 2; do $weir bench --url http://127.0.0.1:$port "${common[@]}" --concurrency 64 > /dev/null; done
for r in 1 2 3; do
  $weir bench --url http://127.0.0.1:$port "${common[@]}" --concurrency 64 > $out/unpinned-$r.txt
  taskset -a -p -c 0 $spid > /dev/null
  taskset -c 1 $weir bench --url http://127.0.0.1:$port "${common[@]}" --concurrency 64 > $out/pinned-$r.txt
  taskset -a -p -c 0,1 $spid > /dev/null
done
kill $spid; wait $spid || true
for f in $out/*-?.txt; do echo "$(basename $f) $(grep -E 'TTFT median|TTFT p99|requests/s' $f | awk '{print $NF}' | tr '\n' ' ')"; done
