#!/bin/sh
# The `sim calibrate --tlb` directory of these holds (tlb/): the `tlb` rows of every batch of
# both layouts (their mean enters), the `tlbr` rows, and the `order` rows over burn's own table
# and scan (order-hashmap/) of both layouts as order/, each file one layout and one hold.
# Run from this directory: sh assemble.sh
set -e
rm -rf tlb; mkdir -p tlb/tlbr tlb/order
cat ema-balanced/tlb.csv p10-ema/tlb.csv > tlb/tlb.csv
cp ema-balanced/tlb.stderr tlb/tlb.stderr; cp lscpu.txt tlb/
for w in ema-balanced p10-ema; do
  for f in $w/tlbr/*.csv; do cp $f tlb/tlbr/$w-$(basename $f); done
  for f in $w/order-hashmap/*.csv; do cp $f tlb/order/$w-$(basename $f); done
done
