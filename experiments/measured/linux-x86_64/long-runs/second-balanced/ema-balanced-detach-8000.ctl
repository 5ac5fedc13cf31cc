03:23:55 waiting for lock
03:23:55 lock held load 11.49
03:23:56 started 17544 probe 17545
03:23:56 row ema-balanced-params | detach | 1 step | ms_per_step = 4.5586 ms | burn Flex+autodiff with Balanced gradient ch rss/hwm KiB 343168 343168 utime/stime 47 19 minflt 85078 schedstat 667523342 686482218 125 load 11.49
03:23:56 row ema-balanced-params | detach | 50 step | ms_per_step = 1.7482 ms | ms_per_step = the thread's CPU time (PROBE_ rss/hwm KiB 343168 343168 utime/stime 47 19 minflt 85078 schedstat 667523342 686482218 125 load 11.49
03:23:56 row ema-balanced-params | detach | 100 step | ms_per_step = 1.8653 ms | ms_per_step = the thread's CPU time (PROBE rss/hwm KiB 343168 343168 utime/stime 47 19 minflt 85078 schedstat 667523342 686482218 125 load 11.49
03:23:56 row ema-balanced-params | detach | 200 step | ms_per_step = 1.9795 ms | ms_per_step = the thread's CPU time (PROBE rss/hwm KiB 343168 343168 utime/stime 47 19 minflt 85078 schedstat 667523342 686482218 125 load 11.49
03:23:57 row ema-balanced-params | detach | 500 step | ms_per_step = 2.8824 ms | ms_per_step = the thread's CPU time (PROBE rss/hwm KiB 530564 530564 utime/stime 93 33 minflt 132149 schedstat 1276818815 691371263 141 load 11.49
03:24:01 row ema-balanced-params | detach | 1000 step | ms_per_step = 7.3433 ms | ms_per_step = the thread's CPU time (PROB rss/hwm KiB 1045644 1045644 utime/stime 447 57 minflt 261141 schedstat 5056781048 732661870 252 load 11.53
03:24:32 row ema-balanced-params | detach | 2000 step | ms_per_step = 31.1303 ms | ms_per_step = the thread's CPU time (PRO rss/hwm KiB 2067500 2067500 utime/stime 3284 328 minflt 516827 schedstat 36126672053 866737402 466 load 11.17
03:25:47 row ema-balanced-params | detach | 3000 step | ms_per_step = 72.3524 ms | ms_per_step = the thread's CPU time (PRO rss/hwm KiB 3094584 3094584 utime/stime 10424 427 minflt 773598 schedstat 108523473024 1156311128 970 load 10.32
03:28:37 row ema-balanced-params | detach | 4000 step | ms_per_step = 169.4347 ms | ms_per_step = the thread's CPU time (PR rss/hwm KiB 4121488 4121488 utime/stime 27205 597 minflt 1030324 schedstat 278031412924 1457117070 1763 load 13.31
03:37:56 stopped utime/stime 82524 749 minflt 1422010 schedstat 832742011318 3051468187 7339 load 12.45
03:38:01 waiting for lock
03:38:01 lock held load 12.33
03:38:01 cont utime/stime 82524 749 minflt 1422010 schedstat 832742011318 3051468187 7339
03:43:19 row ema-balanced-params | detach | 6000 step | ms_per_step = 432.6694 ms | ms_per_step = the thread's CPU time (PR rss/hwm KiB 6175664 6175664 utime/stime 113526 810 minflt 1543868 schedstat 1143370215640 3920462333 9262 load 13.08
03:52:01 stopped utime/stime 165568 879 minflt 1711039 schedstat 1664483662338 4551264751 11783 load 11.88
03:52:06 waiting for lock
03:55:41 lock held load 15.03
03:55:41 cont utime/stime 165574 879 minflt 1711039 schedstat 1664537572447 4555583820 11792
04:09:42 stopped utime/stime 249245 945 minflt 1913845 schedstat 2501917430913 6869772711 17951 load 12.88
04:09:47 waiting for lock
04:18:28 lock held load 11.31
04:18:28 cont utime/stime 249245 945 minflt 1913845 schedstat 2501917430913 6869772711 17951
04:32:16 row ema-balanced-params | detach | 8000 step | ms_per_step = 1091.8880 ms | ms_per_step = the thread's CPU time (P rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 1 step | ms_per_step = 4.5586 ms | burn Flex+autodiff with Balanced  rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 50 step | ms_per_step = 1.7482 ms | ms_per_step = the thread's CPU t rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 100 step | ms_per_step = 1.8653 ms | ms_per_step = the thread's CPU  rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 200 step | ms_per_step = 1.9795 ms | ms_per_step = the thread's CPU  rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 500 step | ms_per_step = 2.8824 ms | ms_per_step = the thread's CPU  rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 1000 step | ms_per_step = 7.3433 ms | ms_per_step = the thread's CPU rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 2000 step | ms_per_step = 31.1303 ms | ms_per_step = the thread's CP rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 3000 step | ms_per_step = 72.3524 ms | ms_per_step = the thread's CP rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 4000 step | ms_per_step = 169.4347 ms | ms_per_step = the thread's C rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 6000 step | ms_per_step = 432.6694 ms | ms_per_step = the thread's C rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:16 row ema-balanced-params | detach/steps=8000 | 8000 step | ms_per_step = 1091.8880 ms | ms_per_step = the thread's  rss/hwm KiB utime/stime 331685 1010 minflt 2058489 schedstat 3326962796744 9335813801 24170 load 12.79
04:32:17 done rc 0
