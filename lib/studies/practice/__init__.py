"""For people who train: which kernels carry which bias (`kernel_table`), what the monitor and the user kernel cost,
whether the monitor's warnings come before a failure (`lead_time`), and the reading and figures of the chapter
"Using this in your training"."""
