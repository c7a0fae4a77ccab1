module goprog

go 1.16
