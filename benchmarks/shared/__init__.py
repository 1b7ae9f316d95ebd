"""What several studies use: the toy-task settings and trainer fields (`settings`), the policy they start from
(`policy`), timers and counters (`instruments`), report output (`output`), the tasks with difficulty levels
(`tasks`), the probe inside the reward (`outcome_probe`), the statistics over seeds (`stats`) and the process pool
that runs the resumable real-model grids (`process_grid`)."""
