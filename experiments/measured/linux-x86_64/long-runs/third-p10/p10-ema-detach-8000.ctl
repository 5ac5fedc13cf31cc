05:38:43 waiting for lock
05:38:43 lock held load 6.82
05:38:51 hold command 1 rc 0 load 6.85
05:38:52 started 16292 probe 16293
05:38:53 row p10-ema-params | detach | 1 step | ms_per_step = 4.0378 ms | burn Flex+autodiff (no simd/rayon); fresh process rss/hwm KiB 12320 12320 utime/stime 62 17 minflt 93918 schedstat 801600173 633213290 163 load 6.85
05:38:53 row p10-ema-params | detach | 50 step | ms_per_step = 1.5533 ms | ms_per_step = the thread's CPU time (PROBE_CPU_T rss/hwm KiB 12320 12320 utime/stime 62 17 minflt 93918 schedstat 801600173 633213290 163 load 6.85
05:38:53 row p10-ema-params | detach | 100 step | ms_per_step = 1.6755 ms | ms_per_step = the thread's CPU time (PROBE_CPU_ rss/hwm KiB 12320 12320 utime/stime 62 17 minflt 93918 schedstat 801600173 633213290 163 load 6.85
05:38:53 row p10-ema-params | detach | 200 step | ms_per_step = 2.2406 ms | ms_per_step = the thread's CPU time (PROBE_CPU_ rss/hwm KiB 12320 12320 utime/stime 62 17 minflt 93918 schedstat 801600173 633213290 163 load 6.85
05:38:53 row p10-ema-params | detach | 500 step | ms_per_step = 2.8719 ms | ms_per_step = the thread's CPU time (PROBE_CPU_ rss/hwm KiB 12940 11916 utime/stime 116 24 minflt 153112 schedstat 1410149765 636656804 193 load 6.85
05:38:57 row p10-ema-params | detach | 1000 step | ms_per_step = 7.2305 ms | ms_per_step = the thread's CPU time (PROBE_CPU rss/hwm KiB 14248 14248 utime/stime 449 55 minflt 325439 schedstat 5048104217 653272572 390 load 6.86
05:39:22 row p10-ema-params | detach | 2000 step | ms_per_step = 25.5759 ms | ms_per_step = the thread's CPU time (PROBE_CP rss/hwm KiB 17512 17512 utime/stime 2938 123 minflt 654895 schedstat 30610622464 722838888 840 load 6.98
05:40:37 row p10-ema-params | detach | 3000 step | ms_per_step = 73.7778 ms | ms_per_step = the thread's CPU time (PROBE_CP rss/hwm KiB 17912 17912 utime/stime 10215 221 minflt 1070803 schedstat 104377497082 1346197419 2148 load 6.33
05:43:04 row p10-ema-params | detach | 4000 step | ms_per_step = 146.5907 ms | ms_per_step = the thread's CPU time (PROBE_C rss/hwm KiB 22632 22632 utime/stime 24825 257 minflt 1233402 schedstat 250834888105 2319918213 3734 load 5.77
05:52:53 stopped utime/stime 83266 368 minflt 1743077 schedstat 836347298322 4745173441 7147 load 10.55
05:52:58 waiting for lock
05:52:58 lock held load 10.51
05:53:07 hold command 2 rc 0 load 10.35
05:53:07 cont utime/stime 83266 368 minflt 1743077 schedstat 836347315737 4745179070 7149
05:55:08 row p10-ema-params | detach | 6000 step | ms_per_step = 353.4228 ms | ms_per_step = the thread's CPU time (PROBE_C rss/hwm KiB 25508 25380 utime/stime 95385 382 minflt 1797957 schedstat 957683591949 5165890957 8431 load 17.52
06:07:07 stopped utime/stime 166989 448 minflt 2036550 schedstat 1674381778571 6538596738 11775 load 14.51
06:07:12 waiting for lock
06:16:54 lock held load 12.81
06:17:02 hold command 3 rc 0 load 12.83
06:17:02 cont utime/stime 166989 448 minflt 2036550 schedstat 1674381778571 6538596738 11775
06:31:02 stopped utime/stime 250643 483 minflt 2094777 schedstat 2511264630345 9468559061 22176 load 11.98
06:31:07 waiting for lock
06:42:43 lock held load 10.51
06:42:52 hold command 4 rc 0 load 10.43
06:42:52 cont utime/stime 250643 483 minflt 2094777 schedstat 2511264630345 9468559061 22176
06:52:58 row p10-ema-params | detach | 8000 step | ms_per_step = 1078.8661 ms | ms_per_step = the thread's CPU time (PROBE_ rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 1 step | ms_per_step = 4.0378 ms | burn Flex+autodiff (no simd/rayon); fr rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 50 step | ms_per_step = 1.5533 ms | ms_per_step = the thread's CPU time ( rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 100 step | ms_per_step = 1.6755 ms | ms_per_step = the thread's CPU time  rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 200 step | ms_per_step = 2.2406 ms | ms_per_step = the thread's CPU time  rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 500 step | ms_per_step = 2.8719 ms | ms_per_step = the thread's CPU time  rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 1000 step | ms_per_step = 7.2305 ms | ms_per_step = the thread's CPU time rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 2000 step | ms_per_step = 25.5759 ms | ms_per_step = the thread's CPU tim rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 3000 step | ms_per_step = 73.7778 ms | ms_per_step = the thread's CPU tim rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 4000 step | ms_per_step = 146.5907 ms | ms_per_step = the thread's CPU ti rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 6000 step | ms_per_step = 353.4228 ms | ms_per_step = the thread's CPU ti rss/hwm KiB  load 7.19
06:52:58 row p10-ema-params | detach/steps=8000 | 8000 step | ms_per_step = 1078.8661 ms | ms_per_step = the thread's CPU t rss/hwm KiB  load 7.19
06:52:58 done rc 0
