#!/bin/bash
# Session 6 run 2: fuzz --attention batches on the GPU, one process per batch
T=target/release/tessel
mkdir -p $OUT/log
for s in 250 300 350; do
  ( /usr/bin/time -f "%e s" timeout 200 $T fuzz --attention --count 50 --seed $s --profile all > $OUT/log/b50_$s.log 2>&1; echo rc=$? >> $OUT/log/b50_$s.log ) &
done
wait
for s in $(seq 250 10 390); do
  ( /usr/bin/time -f "%e s" timeout 100 $T fuzz --attention --count 10 --seed $s --profile all > $OUT/log/b10_$s.log 2>&1; echo rc=$? >> $OUT/log/b10_$s.log ) &
done
wait
cd $OUT && tar czf logs.tgz log && rm -rf log
